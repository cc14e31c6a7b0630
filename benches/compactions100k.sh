#!/bin/bash
# 100,000 compactions on one conversation: append memory/time, then the view
# refresh after one more compaction, and reads of a few turns.
# Usage: compactions100k.sh BINARY TAG
# (the compactions: 100,000 lines over random ranges of at most 5 of the
# 10,000 turns, reasoning strip or keep, seed 7, written once beside it).
set -e
B=$1; T=$2
COMPACTIONS=${TMPDIR:-/tmp}/compactions100k.ndjson
[ -f "$COMPACTIONS" ] || python3 - "$COMPACTIONS" <<'PY'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(100_000):
        a = r.randrange(10_000); b = min(9_999, a + r.randrange(5))
        f.write(json.dumps({"type": "compaction", "from_turn": a, "to_turn": b,
                            "reasoning": r.choice(["strip", "keep"])}) + "\n")
PY
D=${TMPDIR:-/tmp}/compactions100k-$T
rm -rf $D
$B --db $D gen y --events 100000 --compactions 0 --seed 2 >/dev/null
$B --db $D view y >/dev/null
/usr/bin/time -f "$T append 100k compactions: %e s, %M KB" $B --db $D append y < "$COMPACTIONS" >/dev/null
/usr/bin/time -f "$T first view refresh: %e s, %M KB" $B --db $D view y >/dev/null
echo '{"type":"compaction","from_turn":100,"to_turn":102,"reasoning":"strip"}' | $B --db $D append y >/dev/null
/usr/bin/time -f "$T refresh after one more: %e s, %M KB" $B --db $D view y >/dev/null
/usr/bin/time -f "$T project: %e s, %M KB" $B --db $D project y >/dev/null
/usr/bin/time -f "$T read view (no change): %e s, %M KB" $B --db $D view y >/dev/null
/usr/bin/time -f "$T project --turns 5000..5009: %e s, %M KB" $B --db $D project y --turns 5000..5009 >/dev/null
/usr/bin/time -f "$T explain --turn 5000: %e s, %M KB" $B --db $D explain y --turn 5000 >/dev/null
du -sh $D | sed "s/^/$T size /"
