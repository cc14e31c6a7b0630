#!/usr/bin/env bash
# Builds compared on the server's 16-client appends (BENCHMARKS.md, "The
# server"), interleaved: for each round and each binary, a server on a
# fresh database (or on a copy of DB, synced to disk before the server
# starts), `server_load seq 2000` and `concurrent 300` to warm up, then
# `concurrent 1000` measured: the rate, the bytes the block device wrote
# an append (/proc/diskstats), and the server's CPU (/proc/PID/stat).
# Loopback only; every loop is bounded.
#
#   benches/server_rounds.sh BIN [BIN...]   (ROUNDS=3, DB=path to copy)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
cd "$(dirname "$0")/.."
cargo build --release --quiet --example server_load
load=$PWD/target/release/examples/server_load
device=$(df --output=source "${TMPDIR:-/tmp}" | tail -1 | xargs basename)
device=$(lsblk -no pkname "/dev/$device" 2>/dev/null || true)
[ -n "$device" ] || device=$(df --output=source "${TMPDIR:-/tmp}" | tail -1 | xargs basename)
sectors() { awk -v d="$device" '$3 == d { print $10 }' /proc/diskstats; }
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
for round in $(seq "${ROUNDS:-3}"); do
    for bin in "$@"; do
        work=$(mktemp -d)
        if [ -n "${DB:-}" ]; then cp -r "$DB" "$work/db"; sync; fi
        "$bin" --db "$work/db" serve --listen 127.0.0.1:0 >"$work/url" 2>"$work/err" &
        pid=$!
        for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
        url=$(head -1 "$work/url")
        "$load" "$url" "$work/db" seq 2000 >/dev/null
        "$load" "$url" "$work/db" concurrent 300 >/dev/null
        s0=$(sectors); c0=$(cpu $pid)
        rate=$("$load" "$url" "$work/db" concurrent 1000 | grep -o '[0-9]* durable appends/s' || true)
        s1=$(sectors); c1=$(cpu $pid)
        echo "round $round $bin: $rate, device $(( (s1 - s0) * 512 / 16000 )) B/append, server CPU $(( (c1 - c0) * 10 )) ms"
        kill -TERM $pid; wait $pid 2>/dev/null || true
        rm -rf "$work"
    done
done
