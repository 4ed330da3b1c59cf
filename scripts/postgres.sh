#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for the DBOS engine's PostgreSQL tests (make test-postgres).
#
#   bash scripts/postgres.sh start   start it; prints the URL to set as LABKIT_DBOS_POSTGRES_URL (and nothing else
#                                    on standard output, so `url=$(bash scripts/postgres.sh start)` works)
#   bash scripts/postgres.sh stop    stop it and delete its data directory
#
# Without PostgreSQL's server binaries it installs Debian's `postgresql` package (needs root and apt), telling
# the package not to create and start a cluster of its own: the only server this script leaves running is the
# one `start` made, and `stop` ends that one. The server listens on 127.0.0.1 only and trusts every local
# connection, which is right for a test server that lives minutes and holds nothing, and for nothing else.
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user the package creates.
# LABKIT_POSTGRES_PORT picks the first port to try (default 55432); a taken one is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=build/postgres.state   # the running server's data directory, port and URL, for `stop`

say() { echo "postgres.sh: $*" >&2; }

server_bin() {
    # Debian and Ubuntu keep each major version apart; the newest wins. Elsewhere, whatever is on PATH.
    local found
    found=$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    if [ -n "$found" ] && [ -x "$found/pg_ctl" ]; then echo "$found"; return; fi
    if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then dirname "$(command -v pg_ctl)"; fi
}

install_server() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "no PostgreSQL server binaries (initdb, pg_ctl) found, and cannot install them here (needs root and apt-get)."
        say "install PostgreSQL, or point the lab at your own server: see the README."
        exit 1
    fi
    # Debian's package would otherwise make a cluster on port 5432 and start it, outliving this test. Its
    # createcluster.conf reads createcluster.d/, so a file there says no without editing the package's own.
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/labkit-no-main-cluster.conf
    say "installing Debian's postgresql package"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
}

as_owner() {
    # Run a server command as the data directory's owner: ourselves, or `postgres` when we are root.
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() {
    # The state file's server, if it is still up.
    [ -f "$STATE" ] || return 1
    # shellcheck disable=SC1090
    . "$STATE"
    [ -d "$PGDATA_DIR" ] && as_owner "$BIN/pg_ctl" status -D "$PGDATA_DIR" >/dev/null 2>&1
}

start() {
    if running; then
        say "a server started by this script is already running ($URL); run 'bash scripts/postgres.sh stop' first"
        exit 1
    fi
    [ -f "$STATE" ] && stop   # a state file left by a server that is gone: clear what remains of it
    BIN=$(server_bin)
    if [ -z "$BIN" ]; then install_server; BIN=$(server_bin); fi
    if [ -z "$BIN" ]; then say "the postgresql package installed no server binaries"; exit 1; fi
    if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
        say "running as root needs the 'postgres' user (Debian's postgresql package creates it)"; exit 1
    fi
    local port=${LABKIT_POSTGRES_PORT:-55432} tries=0
    while port_taken "$port"; do
        port=$((port + 1)); tries=$((tries + 1))
        if [ "$tries" -ge 50 ]; then say "no free port from ${LABKIT_POSTGRES_PORT:-55432} to $port"; exit 1; fi
    done
    # Under /tmp, not build/: the server's user must reach its data directory, and a checkout under a
    # home directory is often closed to other users.
    PGDATA_DIR=$(mktemp -d "${TMPDIR:-/tmp}/labkit-postgres.XXXXXX")
    chmod 700 "$PGDATA_DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$PGDATA_DIR"; fi
    URL="postgresql://postgres@127.0.0.1:$port/postgres"
    mkdir -p build
    printf 'BIN=%q\nPGDATA_DIR=%q\nURL=%q\n' "$BIN" "$PGDATA_DIR" "$URL" > "$STATE"
    as_owner "$BIN/initdb" -D "$PGDATA_DIR" -U postgres --auth=trust --encoding=UTF8 --no-instructions >/dev/null
    # TCP on 127.0.0.1 only, its socket inside its own directory. fsync off: the tests kill the workers,
    # never the server, and a killed client loses nothing the server acknowledged, fsync or not.
    if ! as_owner "$BIN/pg_ctl" start -w -t 60 -D "$PGDATA_DIR" -l "$PGDATA_DIR/server.log" \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$PGDATA_DIR -c fsync=off" >/dev/null; then
        say "the server did not start; its log:"
        tail -n 20 "$PGDATA_DIR/server.log" >&2 || true
        stop
        exit 1
    fi
    say "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $PGDATA_DIR"
    echo "$URL"
}

stop() {
    if [ ! -f "$STATE" ]; then say "no server started by this script is recorded ($STATE); nothing to stop"; return 0; fi
    # shellcheck disable=SC1090
    . "$STATE"
    if [ -d "$PGDATA_DIR" ] && [ -f "$PGDATA_DIR/postmaster.pid" ]; then
        as_owner "$BIN/pg_ctl" stop -w -t 60 -m fast -D "$PGDATA_DIR" >/dev/null 2>&1 \
            || as_owner "$BIN/pg_ctl" stop -w -m immediate -D "$PGDATA_DIR" >/dev/null 2>&1 || true
    fi
    case "$PGDATA_DIR" in
        */labkit-postgres.*) rm -rf "$PGDATA_DIR" ;;   # only a directory this script made
    esac
    rm -f "$STATE"
    say "stopped the server at $URL and removed its data"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: bash scripts/postgres.sh start|stop" >&2; exit 2 ;;
esac
