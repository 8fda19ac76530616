#!/usr/bin/env bash
# Throwaway PostgreSQL 15 clusters on loopback, for tests, the demo and the bench.
#   scripts/pgcluster.sh start DIR   initdb + start on a free port; writes DIR/env
#   scripts/pgcluster.sh restart DIR crash-restart it (pg_ctl restart -m immediate)
#   scripts/pgcluster.sh stop DIR    stop and remove DIR
# TENURE_PG_DURABILITY picks the settings of a new cluster:
#   fast (the default; tests, demo)  fsync = off, full_page_writes = off: a crash of the
#                                    machine can lose or corrupt it, and a commit costs CPU only
#   durable (make bench's headline)  PostgreSQL's own defaults for fsync, synchronous_commit,
#                                    full_page_writes and wal_sync_method, as production runs
# TENURE_PG_PORT starts it on that port instead of a free one.
# PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres`
# system user (created by Debian's postgresql package, or here if missing).
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?usage: pgcluster.sh start|restart|stop DIR}
dir=${2:?usage: pgcluster.sh start|restart|stop DIR}

dir=$(realpath -m "$dir")

as_owner() {
    if [ "$(id -u)" = 0 ]; then
        # from /: the caller's directory (a checkout under /root) may be closed to postgres
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

case "$cmd" in
start)
    if [ "$(id -u)" = 0 ] && ! id -u postgres >/dev/null 2>&1; then
        useradd --system --home-dir /var/lib/postgresql --shell /usr/sbin/nologin postgres
    fi
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    durability=${TENURE_PG_DURABILITY:-fast}
    case "$durability" in
    fast) settings=$'fsync = off\nfull_page_writes = off' ;;
    durable) settings='# durable: fsync, synchronous_commit, full_page_writes, wal_sync_method at their defaults' ;;
    *)
        echo "TENURE_PG_DURABILITY: fast or durable, not '$durability'" >&2
        exit 2
        ;;
    esac
    port=${TENURE_PG_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
    as_owner "$PG_BIN/initdb" --pgdata="$dir/data" --username=postgres --auth=trust \
        --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
$settings
timezone = 'UTC'
log_timezone = 'UTC'
CONF
    as_owner "$PG_BIN/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait --silent start
    cat >"$dir/env" <<ENV
export PGHOST=127.0.0.1
export PGPORT=$port
export PGUSER=postgres
export PGDATA_DIR=$dir/data
export TENURE_PG_DIR=$dir
export TENURE_PG_DURABILITY=$durability
ENV
    echo "PostgreSQL 15 started on 127.0.0.1:$port (data in $dir/data, $durability)"
    ;;
restart)
    # A crash and recovery: no shutdown checkpoint, every connection dropped.
    as_owner "$PG_BIN/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait --silent \
        --mode=immediate restart
    ;;
stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_owner "$PG_BIN/pg_ctl" --pgdata="$dir/data" --wait --silent --mode=immediate stop || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: pgcluster.sh start|restart|stop DIR" >&2
    exit 2
    ;;
esac
