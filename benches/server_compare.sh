#!/usr/bin/env bash
# Two builds of the server side by side: each round starts each build on a
# fresh database, on loopback, and runs the same bounded loads against it
# (one client's sequential appends, 16 clients' appends with
# examples/server_load, 16 connections with wrk), one build after the other.
#
#   benches/server_compare.sh TAG=DIR TAG=DIR [ROUNDS]
#
# DIR is a cargo target profile directory holding `convstore` and
# `examples/server_load` (for example target/release). wrk comes from
# Debian's package.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 TAG=DIR TAG=DIR [ROUNDS]" >&2; exit 2; }
a=$1 b=$2 rounds=${3:-3}
script=$PWD/benches/server_append.lua

one() {
    local tag=${1%%=*} dir=${1#*=}
    local work
    work=$(mktemp -d)
    "$dir/convstore" --db "$work/db" serve --listen 127.0.0.1:0 >"$work/url" 2>"$work/err" &
    local pid=$!
    for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
    local url
    url=$(head -1 "$work/url")
    "$dir/examples/server_load" "$url" "$work/db" seq 2000 | sed "s/^/$tag /"
    "$dir/examples/server_load" "$url" "$work/db" concurrent 1000 | sed "s/^/$tag /"
    echo "$tag server $(grep VmRSS "/proc/$pid/status")"
    wrk -t2 -c16 -d5s --latency -s "$script" "$url" | grep -E "Requests/sec|50%|99%" | sed "s/^/$tag wrk /"
    curl -s "$url/metrics" | grep -E '^convstore_(flushes_total|flush_group_size_sum)' | sed "s/^/$tag /"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}

for _ in $(seq "$rounds"); do
    one "$a"
    one "$b"
done
