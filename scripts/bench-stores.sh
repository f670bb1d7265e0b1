#!/usr/bin/env bash
# The four figures a change to the stores is held to, for the release build in BIN: payments end to end on SQLite
# (the engine bench's phase 1), spool files taken (phase 5), socket acks on PostgreSQL (5b) and payments end to end
# with one daemon on PostgreSQL (5c), on the bench's own disk and PostgreSQL server as `make bench` runs them.
# Run it on two builds in turn (before and after a change) to pair them: docs/development.md, "Benchmarks".
# Usage: scripts/bench-stores.sh [BIN]   (BIN: .build/release, after `swift build -c release`)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-.build/release}")

. scripts/bench-disk.sh
trap bench_disk_unmount EXIT
bench_disk_mount
. scripts/bench-postgres.sh
trap 'bench_postgres_stop || true; bench_disk_unmount' EXIT
bench_postgres_start "$BENCH_DISK/pg"
PG_SOCKET=$(echo "$PG_DIR" | sed 's|/|%2F|g')

OUT=$("$BIN/klarna-engine-bench" "$BIN/klarna-reconciler" --phases 1,5,5b,5c --sessions "${BENCH_SESSIONS:-2000}" \
    --ingest-requests "${BENCH_INGEST_REQUESTS:-4000}" --spool-files "${BENCH_SPOOL_FILES:-2000}" \
    --postgres-url "postgres://postgres@$PG_SOCKET/klarna_bench" \
    --postgres-cluster-urls "$(for n in 1 2 3 4; do printf 'postgres://postgres@%s/klarna_cluster_%s,' "$PG_SOCKET" "$n"; done)")
value() { echo "$OUT" | awk -v k="$1" '$1 == k { print $2 }'; }
echo "$($BIN/klarna-reconciler --version), files on $BENCH_DISK_KIND"
printf "%-40s %s/s\n" "payments end to end, SQLite" "$(value e2e_sessions_per_second)"
printf "%-40s %s/s\n" "payments end to end, 1 daemon, PostgreSQL" "$(value cluster_1_payments_per_second)"
printf "%-40s %s/s\n" "socket acks, PostgreSQL" "$(value pg_ingest_acks_per_second)"
printf "%-40s %s/s\n" "spool files, SQLite" "$(value spool_files_per_second)"
