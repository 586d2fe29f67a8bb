#!/usr/bin/env bash
# A local cluster to try Depot beyond one machine (DESIGN.md section 11, docs/cluster.md): a throwaway
# PostgreSQL and several depotd on it, each a replica with its own data directory and ipc endpoint.
#
#   scripts/cluster.sh up [N]   start PostgreSQL and N daemons (default 2) under CLUSTER_DIR
#                               (default ./cluster-data), the World Cup model defined; prints endpoints
#   scripts/cluster.sh down     stop the daemons, then PostgreSQL (the data stays: `up` resumes it)
#   scripts/cluster.sh status   what runs
#
# DEPOTD names the daemon (default .build/debug/depotd, built if missing). Remove CLUSTER_DIR to
# start over. The server trusts every local connection: never expose it.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly cluster_dir=$(mkdir -p "${CLUSTER_DIR:-./cluster-data}" && cd "${CLUSTER_DIR:-./cluster-data}" && pwd)
readonly depotd=${DEPOTD:-.build/debug/depotd}

fail() {
    echo "cluster.sh: $*" >&2
    exit 1
}

daemon_running() { [ -f "$1/depotd.pid" ] && kill -0 "$(cat "$1/depotd.pid")" 2>/dev/null; }

up() {
    local count=${1:-2}
    [ -x "$depotd" ] || swift build --product depotd
    local url
    url=$(scripts/postgres.sh start "$cluster_dir/postgres" | tail -n 1)
    local store="$url?schema=depot"
    for index in $(seq 1 "$count"); do
        local dir="$cluster_dir/depotd-$index"
        mkdir -p "$dir"
        if daemon_running "$dir"; then
            echo "depotd-$index: already running, ipc://$dir/depot.sock"
            continue
        fi
        : >"$dir/stdout"
        nohup "$depotd" --data-dir "$dir" --store "$store" --model Examples/worldcup-model.json \
            >"$dir/stdout" 2>"$dir/depotd.log" </dev/null &
        echo $! >"$dir/depotd.pid"
        for _ in $(seq 1 100); do
            grep -q "listening on" "$dir/stdout" 2>/dev/null && break
            daemon_running "$dir" || fail "depotd-$index did not start: $(tail -n 5 "$dir/depotd.log")"
            sleep 0.1
        done
        grep -q "listening on" "$dir/stdout" || fail "depotd-$index did not start in 10 s ($dir/depotd.log)"
        echo "depotd-$index: $(sed -n 's/^depotd listening on //p' "$dir/stdout")"
    done
    echo "PostgreSQL: $store"
    echo "try: .build/debug/depot watch Team --sort teamName --connect ipc://$cluster_dir/depotd-2/depot.sock"
}

down() {
    for dir in "$cluster_dir"/depotd-*; do
        [ -d "$dir" ] || continue
        if daemon_running "$dir"; then
            local pid
            pid=$(cat "$dir/depotd.pid")
            kill -TERM "$pid"
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
            echo "$(basename "$dir"): stopped"
        fi
        rm -f "$dir/depotd.pid"
    done
    [ -d "$cluster_dir/postgres" ] && scripts/postgres.sh stop "$cluster_dir/postgres"
    return 0
}

status() {
    for dir in "$cluster_dir"/depotd-*; do
        [ -d "$dir" ] || continue
        if daemon_running "$dir"; then echo "$(basename "$dir"): running, ipc://$dir/depot.sock"
        else echo "$(basename "$dir"): stopped"; fi
    done
    scripts/postgres.sh url "$cluster_dir/postgres" 2>/dev/null || echo "PostgreSQL: not started"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up [N] | down | status" >&2; exit 2 ;;
esac
