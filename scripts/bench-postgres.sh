# Sourced by scripts/bench.sh, scripts/bench-pg-statements.sh and scripts/bench-stores.sh: a PostgreSQL server of the bench's own (initdb
# into a temporary directory, fsync on, a unix socket only), as the postgres user when run as root (initdb refuses
# root), with the databases the engine bench's PostgreSQL phases take.
#   bench_postgres_start PREFIX [SERVER OPTIONS]  sets PG_BIN and PG_DIR (mktemp PREFIX.XXXXXX) and starts it
#   bench_postgres_stop                           stops it and removes PG_DIR (call it from the caller's EXIT trap)
# pg_ctl starts and stops it: a server started in the background through a shell function would be the child of a
# subshell, which a kill of `$!` does not reach.

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PG_DIR=

as_postgres() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups "$@"; else "$@"; fi; }

bench_postgres_stop() {
    [ -n "$PG_DIR" ] || return 0
    if [ -f "$PG_DIR/data/postmaster.pid" ]; then as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true; fi
    rm -rf "$PG_DIR"
}

bench_postgres_start() {
    PG_DIR=$(mktemp -d "$1.XXXXXX")
    [ "$(id -u)" -eq 0 ] && chown postgres "$PG_DIR"
    as_postgres "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U postgres >/dev/null
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w start -o "-k $PG_DIR -c listen_addresses='' ${2:-}" >/dev/null
    for db in klarna_bench klarna_cluster_1 klarna_cluster_2 klarna_cluster_3 klarna_cluster_4 klarna_quota_1 klarna_quota_2 klarna_quota_3 \
        klarna_pair_1 klarna_pair_2 klarna_pair_3; do
        "$PG_BIN/createdb" -h "$PG_DIR" -U postgres "$db"
    done
}
