#!/usr/bin/env bash
# The server's load benchmark, clients and server in the same run, with
# PostgreSQL's own single-row insert transactions from 16 clients (pgbench)
# as the reference. Loopback only; every loop is bounded in count.
#
#   benches/server_load.sh [--short]
#
# --short (CI): small counts, no 10^6-event set, no PostgreSQL.
# CONVSTORE_BENCH_PROFILE picks the cargo profile (release unless set; CI
# sets test, the profile its test suite already built).
set -euo pipefail
cd "$(dirname "$0")/.."
short=0
[ "${1:-}" = "--short" ] && short=1
profile=${CONVSTORE_BENCH_PROFILE:-release}
cargo build --profile "$profile" --quiet --bin convstore --example server_load
case $profile in
    release | bench) out=$PWD/target/release ;;
    dev | test) out=$PWD/target/debug ;;
    *) out=$PWD/target/$profile ;;
esac
bin=$out/convstore
load=$out/examples/server_load
work=$(mktemp -d)
chmod 755 "$work"   # PostgreSQL's cluster lives here, as the postgres user
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
db=$work/db

if [ $short = 0 ]; then
    echo "== generating the 10^6-event, 10^4-overlay set"
    /usr/bin/time -f "gen: %e s, %M KiB peak" "$bin" --db "$db" gen big --events 1000000 --compactions 10000 --seed 1 >/dev/null
    echo "== CLI project of the full view (3 runs)"
    for _ in 1 2 3; do
        /usr/bin/time -f "cli project: %e s, %M KiB peak" "$bin" --db "$db" project big >/dev/null
    done
fi

start_server() {
    "$bin" --db "$db" serve --listen 127.0.0.1:0 >"$work/url" 2>"$work/err" &
    echo $! >"$work/pid"
    for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
    url=$(head -1 "$work/url")
}
start_server
echo "== server at $url"
if [ $short = 1 ]; then
    "$load" "$url" "$db" seq 200
    "$load" "$url" "$db" concurrent 100
    "$load" "$url" "$db" conflict 20
    "$load" "$url" "$db" follow 100
    "$load" "$url" "$db" followers 20
else
    "$load" "$url" "$db" seq 2000
    "$load" "$url" "$db" concurrent 1000
    "$load" "$url" "$db" conflict 100
    "$load" "$url" "$db" follow 500
    "$load" "$url" "$db" followers 100
    "$load" "$url" "$db" view big 20
    GZIP=1 "$load" "$url" "$db" view big 20
    "$load" "$url" "$db" stream big
fi
curl -s "$url/metrics" | grep -E '^convstore_(flushes_total|appends_total|flush_group_size_(sum|count))' || true
kill -TERM "$(cat "$work/pid")"
wait "$(cat "$work/pid")" 2>/dev/null || true
echo "server exit: graceful"

if [ $short = 0 ] && [ -x /usr/lib/postgresql/15/bin/initdb ]; then
    echo "== PostgreSQL reference: 16 clients, single-row insert transactions"
    pg=$work/pg
    mkdir -p "$pg" && chown postgres "$pg"
    pgbin=/usr/lib/postgresql/15/bin
    runuser -u postgres -- "$pgbin/initdb" -D "$pg/data" -A trust >/dev/null
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg/data" -o "-k $pg -c listen_addresses=''" -l "$pg/log" -w start >/dev/null
    runuser -u postgres -- "$pgbin/psql" -h "$pg" -d postgres -qc "create table events (conv int, seq bigserial, body text)"
    echo "insert into events (conv, body) values (:client_id, 'message: a line of the conversation');" >"$pg/insert.sql"
    chown postgres "$pg/insert.sql"
    runuser -u postgres -- "$pgbin/pgbench" -h "$pg" -n -c 16 -j 2 -t 1000 -r -f "$pg/insert.sql" postgres | grep -E "tps|latency|transactions"
    runuser -u postgres -- "$pgbin/pgbench" -h "$pg" -n -c 1 -j 1 -t 2000 -f "$pg/insert.sql" postgres | grep -E "tps|latency average"
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg/data" -w stop >/dev/null
fi
