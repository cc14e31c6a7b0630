#!/usr/bin/env bash
# Commands read from the disk rather than the page cache: each run first
# drops the page cache (`echo 3 > /proc/sys/vm/drop_caches`, as root), then
# times the command and counts what it read from the block device
# (`/proc/PID/io` read_bytes, through `/usr/bin/time`'s %I, 512-byte
# blocks). Beside them, the disk's own sequential read rate: the database's
# files read cold with `cat`, and a plain `dd` of the largest file.
#
#   benches/cold_cache.sh CONVSTORE DB CONVERSATION [ROUNDS]
#
# The floor of a command is the bytes it reads at the disk's sequential
# rate; the goal (issue 24) is within 1.5x of it. Loopback-free and bounded:
# ROUNDS (default 3) runs of each command.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 CONVSTORE DB CONVERSATION [ROUNDS]" >&2; exit 2; }
bin=$1 db=$2 conv=$3 rounds=${4:-3}
[ "$(id -u)" = 0 ] || { echo "error: dropping the page cache needs root" >&2; exit 1; }

drop() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# Seconds and bytes read from the device by "$@", cold.
cold() {
    drop
    /usr/bin/time -f '%e %I' "$@" 2>&1 >/dev/null | tail -1
}

size=$(du -sb "$db" | cut -f1)
echo "database: $db, $((size / 1000000)) MB"
largest=$(find "$db" -type f -printf '%s %p\n' | sort -n | tail -1 | cut -d' ' -f2)
for _ in $(seq "$rounds"); do
    drop
    start=$(date +%s.%N)
    find "$db" -type f -exec cat {} + >/dev/null
    end=$(date +%s.%N)
    echo "cat of every file: $(echo "$start $end $size" | awk '{ printf "%.2f s, %.0f MB/s", $2 - $1, $3 / ($2 - $1) / 1e6 }')"
    drop
    dd if="$largest" of=/dev/null bs=4M 2>&1 | tail -1 | sed 's/^/dd of the largest file: /'
done

# The disk's rate varies from one moment to the next (a virtual disk's
# host cache), so each cold run is paired with a cold `cat` of every file
# just before it, and the ratio of the two is given.
for command in "project $conv" "verify" "log $conv"; do
    for _ in $(seq "$rounds"); do
        read -r floor _ < <(cold find "$db" -type f -exec cat {} +)
        # shellcheck disable=SC2086
        read -r seconds blocks < <(cold "$bin" --db "$db" $command)
        # shellcheck disable=SC2086
        warm=$(/usr/bin/time -f '%e' "$bin" --db "$db" $command 2>&1 >/dev/null | tail -1)
        ratio=$(echo "$seconds $floor" | awk '{ printf "%.1f", $1 / $2 }')
        echo "$command: cold $seconds s, read $((blocks * 512 / 1000000)) MB; warm $warm s; cat of every file just before: $floor s (${ratio}x)"
    done
done
