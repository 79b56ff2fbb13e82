#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the PostgreSQL backend's tests: initdb in a temporary
# directory as the unprivileged `postgres` user, a unix socket in that directory, no TCP
# port (`listen_addresses = ''`).
#
#   eval "$(scripts/pg-cluster.sh start)"   # exports AGENTWAL_PG_HOST (the socket directory),
#                                           # AGENTWAL_PG_DATA and AGENTWAL_PG_BIN
#   scripts/pg-cluster.sh pids  BASE        # the postmaster's pid, then its children's
#   scripts/pg-cluster.sh start-again BASE  # start after a kill: waits for the old pids first
#   scripts/pg-cluster.sh stop  BASE        # stop the server, remove BASE
#   scripts/pg-cluster.sh standby BASE      # a synchronous standby of BASE's server, in a new
#                                           # base dir (its own data dir and socket dir):
#                                           # prints `export AGENTWAL_PG_STANDBY_HOST=...`
#                                           # once BASE reports it `sync_state = 'quorum'`
#   scripts/pg-cluster.sh promote SBASE     # promote that standby (`pg_ctl promote -w`)
#
# A standby is stopped and removed like any cluster (`stop SBASE`).
#
# `start` installs Debian's `postgresql` when no /usr/lib/postgresql/*/bin exists, and exits
# non-zero saying why whenever the server does not come up: nothing here skips silently.
set -euo pipefail

die() { echo "pg-cluster: $*" >&2; exit 1; }

pg_bin() {
    local bin
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$bin" ]; then
        echo "pg-cluster: no /usr/lib/postgresql/*/bin; installing postgresql" >&2
        [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and installing it needs root"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 \
            || die "apt-get install postgresql failed"
        bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
        [ -n "$bin" ] || die "postgresql installed, but no /usr/lib/postgresql/*/bin"
    fi
    echo "$bin"
}

# Runs a server binary as the unprivileged owner of the cluster (initdb and postgres refuse
# to run as root).
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# The server's pids: the postmaster (line 1 of postmaster.pid), then its children.
pids() {
    local base=$1 pm
    [ -f "$base/data/postmaster.pid" ] || return 0
    pm=$(head -1 "$base/data/postmaster.pid")
    [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null || return 0
    echo "$pm"
    ps -o pid= --ppid "$pm" | tr -d ' ' || true
}

start_server() {
    local base=$1 bin=$2
    as_owner "$bin/pg_ctl" -D "$base/data" -l "$base/log" -w -t 60 start >/dev/null \
        || { tail -20 "$base/log" >&2 || true; die "pg_ctl start failed (log above: $base/log)"; }
}

cmd=${1:-}
case "$cmd" in
start)
    bin=$(pg_bin)
    [ "$(id -u)" -ne 0 ] || id postgres >/dev/null 2>&1 || die "running as root, but there is no postgres user"
    base=$(mktemp -d /tmp/agentwal-pg.XXXXXX)
    chmod 700 "$base"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$base"
    as_owner "$bin/initdb" -D "$base/data" -U postgres -A trust --no-sync >"$base/initdb.log" 2>&1 \
        || { cat "$base/initdb.log" >&2; die "initdb failed"; }
    # Settings go in postgresql.conf, not `pg_ctl -o`: a restart after a crash reads the file.
    printf "listen_addresses = ''\nunix_socket_directories = '%s'\n" "$base" >>"$base/data/postgresql.conf"
    start_server "$base" "$bin"
    echo "export AGENTWAL_PG_HOST='$base' AGENTWAL_PG_DATA='$base/data' AGENTWAL_PG_BIN='$bin'"
    ;;
start-again)
    base=${2:?usage: pg-cluster.sh start-again BASE}
    bin=$(pg_bin)
    # After a kill the old processes must be gone, or the start finds postmaster.pid in use.
    for _ in $(seq 1 200); do
        [ -z "$(pids "$base")" ] && break
        sleep 0.05
    done
    [ -z "$(pids "$base")" ] || die "the old server's processes did not exit"
    start_server "$base" "$bin"
    ;;
standby)
    primary=${2:?usage: pg-cluster.sh standby BASE}
    bin=$(pg_bin)
    [ -n "$(pids "$primary")" ] || die "no server running at $primary"
    sb=$(mktemp -d /tmp/agentwal-pg.XXXXXX)
    chmod 700 "$sb"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$sb"
    # -R writes standby.signal and primary_conninfo (with application_name=s1, the name
    # synchronous_standby_names lists); -X stream: the WAL of the copy comes with it.
    as_owner "$bin/pg_basebackup" -D "$sb/data" -R -X stream -c fast \
        -d "host=$primary user=postgres application_name=s1" >"$sb/basebackup.log" 2>&1 \
        || { cat "$sb/basebackup.log" >&2; die "pg_basebackup failed"; }
    # The copy has the primary's postgresql.conf: its own socket directory (later lines win).
    printf "unix_socket_directories = '%s'\n" "$sb" >>"$sb/data/postgresql.conf"
    start_server "$sb" "$bin"
    as_owner "$bin/psql" -h "$primary" -U postgres -d postgres -qAt \
        -c "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (s1)'" \
        -c "SELECT pg_reload_conf()" >/dev/null || die "cannot set synchronous_standby_names"
    state=
    for _ in $(seq 1 200); do
        state=$(as_owner "$bin/psql" -h "$primary" -U postgres -d postgres -qAt \
            -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'" || true)
        [ "$state" = quorum ] && break
        sleep 0.05
    done
    [ "$state" = quorum ] || { tail -20 "$sb/log" >&2 || true; die "the standby did not become synchronous (sync_state: '${state:-none}')"; }
    echo "export AGENTWAL_PG_STANDBY_HOST='$sb' AGENTWAL_PG_STANDBY_DATA='$sb/data'"
    ;;
promote)
    sb=${2:?usage: pg-cluster.sh promote SBASE}
    bin=$(pg_bin)
    as_owner "$bin/pg_ctl" -D "$sb/data" -w -t 60 promote >/dev/null \
        || { tail -20 "$sb/log" >&2 || true; die "pg_ctl promote failed (log above: $sb/log)"; }
    ;;
pids)
    pids "${2:?usage: pg-cluster.sh pids BASE}"
    ;;
stop)
    base=${2:?usage: pg-cluster.sh stop BASE}
    case "$base" in /tmp/agentwal-pg.*) ;; *) die "refusing to remove $base: not a cluster this script made" ;; esac
    bin=$(pg_bin)
    if [ -n "$(pids "$base")" ]; then
        # A frozen server (a SIGSTOP probe that failed midway) must be thawed to stop.
        for p in $(pids "$base"); do kill -CONT "$p" 2>/dev/null || true; done
        as_owner "$bin/pg_ctl" -D "$base/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$base"
    ;;
*)
    die "usage: pg-cluster.sh start | start-again BASE | pids BASE | standby BASE | promote SBASE | stop BASE"
    ;;
esac
