#!/usr/bin/env bash
# Regenerates the screenshots of docs/inspector.md: a database of real JP
# conversations (../shared/data/jp), compacted as the text says, served by
# `convstore serve` on loopback, photographed by headless Chromium.
#
#   docs/inspector/screenshots.sh [BIN]     # BIN: target/release/convstore
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/convstore}
JP=../shared/data/jp
OUT=docs/inspector
[ -x "$BIN" ] || cargo build --release
work=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
db=$work/db
for f in "$JP"/*.events.json; do
    "$BIN" --db "$db" import --format jp "$f" -q
done
"$BIN" --db "$db" import --format jp "$JP/17728322628-bear-mcp-server-design-review.events.json" --name bear -q
"$BIN" --db "$db" compact bear --profile default -q
"$BIN" --db "$db" compact bear --summary "Reviewed the jp_bear_mcp crate plan: scope, tool list, tests." \
    --from 0 --to 2 --recall-hints -q
"$BIN" --db "$db" pin bear --turns 3..4
"$BIN" --db "$db" fork bear --at-turn 5 --name bear-retry -q
"$BIN" --db "$db" serve --listen 127.0.0.1:0 >"$work/url" 2>"$work/serve.log" &
server=$!
for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(head -1 "$work/url")
shoot() {
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --hide-scrollbars --user-data-dir="$work/profile" --window-size="$3" \
        --virtual-time-budget=8000 --screenshot="$OUT/$1" "$url$2" 2>/dev/null
}
shoot list.png / 1400,900
shoot conversation.png /c/bear 1400,1500
shoot as-of.png "/c/bear?as_of=300" 1400,1100
shoot later-turns.png "/c/bear?from=400" 1400,1100
ls -l "$OUT"/*.png
