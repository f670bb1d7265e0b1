#!/usr/bin/env bash
# Where PostgreSQL's time goes in chosen phases of the engine bench: a server of its own with pg_stat_statements
# (planning tracked too), the phases run against it, then the statements of one database by calls (DB, by default
# klarna_cluster_1: phase 5c's one-daemon run), and each database's totals. Used for issue 23's investigations (BENCHMARKS.md at 0490c17).
# Usage: scripts/bench-pg-statements.sh [PHASES] (default 5c; after `swift build -c release`, or BIN=DIR with both binaries)
#   SESSIONS=N payments per run (2000); PG_OPTIONS="-c name=value ..." more server settings (to add auto_explain, name
#   shared_preload_libraries=pg_stat_statements,auto_explain again); EXTRA="..." more options of the engine bench
#   (--ingest-requests 30000 for phase 5b's burst); DB=NAME the database whose statements are listed (klarna_bench for
#   phase 5b). A commit is listed by the letters of its writes, as its prepared statement is named (`commit gsie`).
set -euo pipefail
cd "$(dirname "$0")/.."
PHASES=${1:-5c}
. scripts/bench-disk.sh
. scripts/bench-postgres.sh
trap 'bench_postgres_stop || true; bench_disk_unmount' EXIT
bench_disk_mount
echo "files on $BENCH_DISK_KIND"
bench_postgres_start "$BENCH_DISK/pg" "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on \
    -c pg_stat_statements.track=all ${PG_OPTIONS:-}"
psql() { "$PG_BIN/psql" -h "$PG_DIR" -U postgres -d klarna_bench -P pager=off "$@"; }
psql -qc "CREATE EXTENSION pg_stat_statements"
SOCKET=$(echo "$PG_DIR" | sed 's|/|%2F|g')
urls() { for db in "$@"; do printf 'postgres://postgres@%s/%s,' "$SOCKET" "$db"; done; }
"${BIN:-.build/release}"/klarna-engine-bench "${BIN:-.build/release}"/klarna-reconciler --phases "$PHASES" --sessions "${SESSIONS:-2000}" ${EXTRA:-} \
    --postgres-url "postgres://postgres@$SOCKET/klarna_bench" \
    --postgres-cluster-urls "$(urls klarna_cluster_1 klarna_cluster_2 klarna_cluster_3 klarna_cluster_4)" \
    --postgres-quota-urls "$(urls klarna_quota_1 klarna_quota_2 klarna_quota_3)" \
    --postgres-pair-urls "$(urls klarna_pair_1 klarna_pair_2 klarna_pair_3)"
psql -c "SELECT d.datname AS database, sum(calls) AS calls, round(sum(total_plan_time)::numeric) AS plan_ms,
    round(sum(total_exec_time)::numeric) AS exec_ms FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid GROUP BY 1 ORDER BY 1"
psql -c "SELECT calls, round(total_plan_time::numeric, 1) AS plan_ms, round(total_exec_time::numeric, 1) AS exec_ms,
    round((total_exec_time / greatest(calls, 1))::numeric, 3) AS mean_ms, rows, left(regexp_replace(CASE WHEN query LIKE 'WITH fence%' THEN 'commit ' || array_to_string(ARRAY(SELECT m[1] FROM regexp_matches(query, '^([a-z]) AS \(', 'gn') AS m), '') ELSE query END, '\s+', ' ', 'g'), 100) AS statement
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '${DB:-klarna_cluster_1}') ORDER BY calls DESC LIMIT 25"
