#!/usr/bin/env bash
# The PostgreSQL backend beside the sled backend, in one run, on the same
# machine: ingest and projection of the 10^6-event, 10^4-overlay set from
# the CLI, durable single-event append latency, 8 concurrent writers, disk
# against payload; and PostgreSQL's own single-row insert transactions
# (pgbench, 8 clients) as the reference. PostgreSQL runs on this host over
# a Unix socket, with its defaults (fsync on, synchronous_commit on).
#
#   benches/postgres.sh [--short]
#
# --short (CI): 10^5 events, short loops.
# CONVSTORE_BENCH_PROFILE picks the cargo profile (release unless set; CI
# sets test, the profile its test suite already built).
set -euo pipefail
cd "$(dirname "$0")/.."
short=0
[ "${1:-}" = "--short" ] && short=1
events=1000000 compactions=10000 appends=2000 seconds=10
[ $short = 1 ] && { events=100000; compactions=1000; appends=300; seconds=3; }
profile=${CONVSTORE_BENCH_PROFILE:-release}
cargo build --profile "$profile" --quiet --bin convstore --example append_latency --example concurrent_appends
case $profile in
    release | bench) out=$PWD/target/release ;;
    dev | test) out=$PWD/target/debug ;;
    *) out=$PWD/target/$profile ;;
esac
bin=$out/convstore
examples=$out/examples
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$pgbin/initdb" ] || { echo "postgres.sh: PostgreSQL's server binaries are not installed" >&2; exit 1; }
work=$(mktemp -d)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
trap 'as_pg "$pgbin/pg_ctl" -D "$work/pg/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres "$work/pg"
as_pg "$pgbin/initdb" -D "$work/pg/data" -A trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg/data" -o "-k $work/pg -c listen_addresses='' -c shared_buffers=512MB -c max_wal_size=4GB" -l "$work/pg/log" -w start >/dev/null
socket=$(printf %s "$work/pg" | sed 's,/,%2F,g')
pg() { printf 'postgres://postgres@%s/%s' "$socket" "$1"; }
psql_in() { "$pgbin/psql" -X -q -t -A -h "$work/pg" -U postgres -d "$1" -c "$2"; }
for db in ingest latency writers; do psql_in postgres "create database $db"; done
sled=$work/sled.db
export CONVSTORE_CACHE_DIR=$work/cache

echo "== ingest: gen $events events, $compactions compactions (batched), sled then PostgreSQL"
/usr/bin/time -f "sled gen: %e s, %M KiB peak" "$bin" --db "$sled" gen big --events $events --compactions $compactions --seed 1 -q >/dev/null
/usr/bin/time -f "postgres gen: %e s, %M KiB peak" "$bin" --db "$(pg ingest)" gen big --events $events --compactions $compactions --seed 1 -q >/dev/null
echo "== project the whole view, end to end (3 runs each)"
for _ in 1 2 3; do
    /usr/bin/time -f "sled project: %e s, %M KiB peak" "$bin" --db "$sled" project big >/dev/null
    /usr/bin/time -f "postgres project: %e s, %M KiB peak" "$bin" --db "$(pg ingest)" project big >/dev/null
done
echo "== disk against payload"
payload=$("$bin" --db "$sled" stats big --json | python3 -c 'import json,sys; print(sum(k["bytes"] for k in json.load(sys.stdin)["kinds"].values()))')
sled_bytes=$(du -sb "$sled" | cut -f1)
pg_bytes=$(psql_in ingest "select sum(pg_total_relation_size(c.oid)) from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'public' and c.relkind = 'r'")
python3 - "$payload" "$sled_bytes" "$pg_bytes" <<'PY'
import sys
payload, sled, pg = map(int, sys.argv[1:])
print(f"payload {payload/1e6:.1f} MB; sled {sled/1e6:.1f} MB ({sled/payload:.2f}x); postgres {pg/1e6:.1f} MB ({pg/payload:.2f}x)")
PY
echo "== durable single-event appends"
mkdir -p "$work/latency"
"$examples/append_latency" 100000 $appends "$work/latency" | grep -E "durable|fdatasync" | sed 's/^/sled: /'
"$examples/append_latency" 100000 $appends "$(pg latency)" | grep -E "durable|fdatasync" | sed 's/^/postgres: /'
echo "== 8 concurrent writers, a conversation each, then all on one"
"$examples/concurrent_appends" "$work/writers.db" 8 $seconds own
"$examples/concurrent_appends" "$(pg writers)" 8 $seconds own
"$examples/concurrent_appends" "$(pg writers)" 8 $seconds one
echo "== PostgreSQL's own single-row insert transactions, 8 clients (pgbench)"
psql_in postgres "create table events (conv int, seq bigserial, body text)"
echo "insert into events (conv, body) values (:client_id, 'message: a line of the conversation');" >"$work/insert.sql"
chmod 644 "$work/insert.sql"
"$pgbin/pgbench" -h "$work/pg" -U postgres -n -c 8 -j 2 -T $seconds -f "$work/insert.sql" postgres 2>/dev/null | grep -E "^tps|latency average"
