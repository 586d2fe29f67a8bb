#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests, benchmarks and local clusters (DESIGN section 11).
#
#   scripts/postgres.sh start DIR   initdb in DIR (first time), start on 127.0.0.1 and a unix socket
#                                   in DIR, print postgresql://depot@127.0.0.1:PORT/postgres
#   scripts/postgres.sh stop DIR    stop the server of DIR, even a half-started one
#   scripts/postgres.sh url DIR     print the URL of the running server of DIR
#
# Uses Debian's `postgresql` package (`make setup-system`), the newest /usr/lib/postgresql/*/bin
# unless PG_BIN names another. PostgreSQL refuses to run as root, so under root the server runs as
# a dedicated system user (PG_USER, default `depot-postgres`, created if missing) that owns DIR;
# otherwise it runs as the caller. Trust authentication, loopback only: never expose it.
# fsync is off (PG_FSYNC=on to keep it): the data is thrown away, and a crash loses nothing a test
# needs, since every test starts from an empty cluster.
set -euo pipefail

readonly database_user=depot

usage() {
    echo "usage: $0 start DIR | stop DIR | url DIR" >&2
    exit 2
}

fail() {
    echo "postgres.sh: $*" >&2
    exit 1
}

find_binaries() {
    if [ -n "${PG_BIN:-}" ]; then
        [ -x "$PG_BIN/initdb" ] || fail "PG_BIN=$PG_BIN has no initdb"
        echo "$PG_BIN"
        return
    fi
    local candidate
    candidate=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$candidate" ] && [ -x "$candidate/initdb" ] \
        || fail "no PostgreSQL server under /usr/lib/postgresql/*/bin: install Debian's postgresql package (make setup-system)"
    echo "$candidate"
}

# The account the server runs as: the caller, or under root a dedicated unprivileged system user.
server_user() {
    if [ "$(id -u)" -ne 0 ]; then
        id -un
        return
    fi
    local user=${PG_USER:-depot-postgres}
    if ! id -u "$user" >/dev/null 2>&1; then
        useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user" \
            || id -u "$user" >/dev/null 2>&1 || fail "could not create the system user $user"
    fi
    echo "$user"
}

# Runs a command as the server's account, from DIR (the account may not enter the caller's directory).
as_server_user() {
    if [ "$(id -u)" -eq 0 ]; then
        (cd "$dir" && runuser -u "$user" -- "$@")
    else
        (cd "$dir" && "$@")
    fi
}

# A port nothing listens on; the server's own bind decides, and start() retries if it loses a race.
free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || {
            echo "$port"
            return
        }
    done
}

# Whether the pid file names a live postmaster (not a zombie: in a container nothing may reap it).
postmaster_alive() {
    local pid state
    pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    [ -n "$pid" ] || return 1
    state=$(sed -n 's/.*) \(.\).*/\1/p' "/proc/$pid/stat" 2>/dev/null || true)
    [ -n "$state" ] && [[ $state != Z* ]]
}

is_running() {
    postmaster_alive && as_server_user "$bin/pg_ctl" status -D "$dir/data" >/dev/null 2>&1
}

print_url() {
    [ -f "$dir/port" ] || fail "no server was started in $dir"
    echo "postgresql://$database_user@127.0.0.1:$(cat "$dir/port")/postgres"
}

start() {
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
        chown -R "$user" "$dir"
        runuser -u "$user" -- test -w "$dir" \
            || fail "$user cannot write to $dir: choose a directory whose parents it can enter (e.g. under /tmp)"
    fi
    if is_running; then
        print_url
        return
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        rm -rf "$dir/data"
        as_server_user "$bin/initdb" -D "$dir/data" -U "$database_user" --auth=trust --encoding=UTF8 \
            --no-locale >"$dir/initdb.log" 2>&1 || {
            cat "$dir/initdb.log" >&2
            fail "initdb failed in $dir/data"
        }
    fi
    local attempt port
    for attempt in 1 2 3 4 5 6 7 8; do
        # A restarted server keeps its port when it can, so that clients reconnect to the same URL.
        if [ "$attempt" -eq 1 ] && [ -f "$dir/port" ]; then port=$(cat "$dir/port"); else port=$(free_port); fi
        # A stale pid file (killed server) would make pg_ctl refuse to start.
        [ -f "$dir/data/postmaster.pid" ] && ! is_running && rm -f "$dir/data/postmaster.pid"
        local log_start
        log_start=$(($(stat -c %s "$dir/postgres.log" 2>/dev/null || echo 0) + 1))
        if as_server_user "$bin/pg_ctl" start -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=${PG_FSYNC:-off} -c max_connections=200" \
            >/dev/null 2>&1; then
            echo "$port" >"$dir/port"
            print_url
            return
        fi
        # Another process took the port between the probe and the bind: try another one.
        local recent
        recent=$(tail -c "+$log_start" "$dir/postgres.log" 2>/dev/null || true)
        [[ $recent == *"could not bind"* || $recent == *"already in use"* ]] || break
    done
    tail -n 20 "$dir/postgres.log" >&2 2>/dev/null || true
    stop_server
    fail "the server in $dir did not start (log: $dir/postgres.log)"
}

stop_server() {
    local pid_file="$dir/data/postmaster.pid"
    if [ ! -f "$pid_file" ]; then
        echo "postgres.sh: no server running in $dir" >&2
        return
    fi
    if ! postmaster_alive; then
        rm -f "$pid_file"
        echo "postgres.sh: the server in $dir had already stopped; removed its pid file" >&2
        return
    fi
    if as_server_user "$bin/pg_ctl" stop -D "$dir/data" -m fast -w -t 30 >/dev/null 2>&1 \
        || as_server_user "$bin/pg_ctl" stop -D "$dir/data" -m immediate -w -t 10 >/dev/null 2>&1; then
        echo "postgres.sh: stopped the server in $dir" >&2
        return
    fi
    # Half-started or unresponsive: end the postmaster named by the pid file (its children follow).
    local pid
    pid=$(head -n 1 "$pid_file" 2>/dev/null || true)
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pid_file"
    echo "postgres.sh: killed the server in $dir" >&2
}

[ $# -eq 2 ] || usage
command=$1
dir=$2
[ -n "$dir" ] || usage
case "$dir" in /*) ;; *) dir="$(pwd)/$dir" ;; esac
bin=$(find_binaries)

case "$command" in
    start)
        user=$(server_user)
        start
        ;;
    stop)
        [ -d "$dir" ] || {
            echo "postgres.sh: $dir does not exist; nothing to stop" >&2
            exit 0
        }
        user=$(server_user)
        stop_server
        ;;
    url)
        [ -d "$dir" ] || fail "$dir does not exist"
        user=$(server_user)
        is_running || fail "no server is running in $dir"
        print_url
        ;;
    *) usage ;;
esac
