#!/usr/bin/env bash
# Disk taken by a log appended one event at a time (BENCHMARKS.md, "Logs
# appended an event at a time"): for each length, `gen --batch 1` into a
# fresh database, then the payload (`stats --json` bytes), `du -sb` of the
# database and the size of sled's file. Each binary given is measured in
# turn at each length, so that builds compare in one run.
#
#   benches/disk_one_at_a_time.sh BIN [BIN...]   (LENGTHS="5000 100000" to choose)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for n in ${LENGTHS:-5000 20000 50000 100000 300000}; do
  for bin in "$@"; do
    db="$dir/db"
    rm -rf "$db"
    start=$(date +%s.%N)
    "$bin" --db "$db" gen one --events "$n" --compactions $((n / 100)) --batch 1 -q > /dev/null
    end=$(date +%s.%N)
    payload=$("$bin" --db "$db" stats one --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes"])')
    du=$(du -sb "$db" | cut -f1)
    sled=$(stat -c %s "$db/db")
    python3 -c "print('%d %s: %.1f s, payload %.1f MB, du %.1f MB (%.2fx), sled %.1f MB' % ($n, '$bin', $end - $start, $payload / 1e6, $du / 1e6, $du / $payload, $sled / 1e6))"
  done
done
