# Sourced by the bench scripts. Sets `root` (the repository) and `work` (a temporary
# directory), and on exit stops every process recorded in `bench_pids` and the cluster in
# `bench_cluster` (a cluster/start.sh directory, when set), then removes `work`.
#
#   rounds_and_dirs "$@" the arguments ROUNDS BIN_DIR [BIN_DIR ...] of the alternating
#                        benches: sets `rounds` and `dirs`, or prints the usage and exits
#   free_port            a free loopback TCP port
#   wait_port PORT       wait (up to 30 s) until something listens on PORT
#   start_serve BIN [TOML] [DATA]
#                        `BIN serve` on a free loopback port with a fresh data directory
#                        under `work` (or DATA, kept from an earlier server), TOML as its
#                        configuration; sets `port`, `pid`, `url` and `data`, and waits until
#                        it answers `GET /readyz`
#   stop_serve           stop the server start_serve started last
#   start_cluster3 BIN   a 3-node cluster (cluster/start.sh) under `work`, given time to elect;
#                        sets `url_of N` (node N's MCP URL)
#   cluster_cpu          the CPU time (user + system, clock ticks) of that cluster's node 1 and
#                        of nodes 2 and 3 together: "NODE1 NODES23"
#   open_session URL     a 2025-11-25 session on the MCP endpoint URL: sets `sid` and `h`
#                        (curl's arguments for a request in it)
#   long_task URL        a `slow_compute` task of an hour created in that session; prints its id
#   report_delivery single|cluster
#                        the stream delivery delays the server (or the 3 nodes) measured,
#                        from GET /status (benches/delivery.py)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
bench_pids=()
bench_cluster=
bench_cleanup() {
    local p
    for p in "${bench_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${bench_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [ -n "$bench_cluster" ] && [ -f "$bench_cluster/node-1.toml" ]; then
        "$root/cluster/stop.sh" "$bench_cluster" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap bench_cleanup EXIT

rounds_and_dirs() {
    if [ $# -lt 2 ]; then
        echo "usage: $0 ROUNDS BIN_DIR [BIN_DIR ...]" >&2
        exit 2
    fi
    rounds=$1
    shift
    dirs=("$@")
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() {
    for _ in $(seq 1 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

start_serve() {
    local bin=$1 config=${2:-}
    local opts=()
    port=$(free_port)
    data=${3:-$(mktemp -d -p "$work")}
    if [ -n "$config" ]; then
        printf '%s\n' "$config" >"$data.toml"
        opts=(--config "$data.toml")
    fi
    "$bin" serve "${opts[@]}" --listen "127.0.0.1:$port" --data-dir "$data" >"$data.log" 2>&1 &
    pid=$!
    bench_pids+=("$pid")
    url=http://127.0.0.1:$port/mcp
    wait_port "$port"
    wait_ready "127.0.0.1:$port"
}

# Wait (up to 120 s: a node reopening a million records takes a while) until ADDR answers
# `GET /readyz` with 200, over plain HTTP or TLS.
wait_ready() {
    local s
    for _ in $(seq 1 600); do
        for s in http https; do
            [ "$(curl -sk -o /dev/null -w '%{http_code}' "$s://$1/readyz")" = 200 ] && return 0
        done
        sleep 0.2
    done
    echo "$1 not ready" >&2
    return 1
}

start_cluster3() {
    bench_cluster=$work/cluster
    BASE_PORT=${BASE_PORT:-$(($(free_port) / 200 * 200 % 60000))} NODE_BIN=$1 \
        "$root/cluster/start.sh" 3 "$bench_cluster" >"$work/start.log"
    # Let the groups elect and settle on their preferred leaders.
    sleep 8
}

cluster_cpu() {
    local t=() i
    for i in 1 2 3; do
        t+=("$(awk '{print $14 + $15}' "/proc/$(cat "$bench_cluster/node-$i.pid")/stat")")
    done
    echo "${t[0]} $((t[1] + t[2]))"
}

url_of() {
    awk -v n="node $1" '$0 ~ n {for(i=1;i<=NF;i++) if($i ~ /^http/) print $i}' "$work/start.log" | head -1
}

stop_serve() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

report_delivery() {
    case "$1" in
    single) python3 "$root/benches/delivery.py" "$url" ;;
    cluster) python3 "$root/benches/delivery.py" "$(url_of 1)" "$(url_of 2)" "$(url_of 3)" ;;
    esac
}

open_session() {
    h=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
    sid=$(curl -si "${h[@]}" "$1" -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' |
        tr -d '\r' | awk 'tolower($1)=="mcp-session-id:"{print $2}')
    h+=(-H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-11-25')
    curl -s "${h[@]}" "$1" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
}

long_task() {
    curl -s "${h[@]}" "$1" -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_compute","arguments":{"seconds":3600},"task":{"ttl":3600000}}}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["task"]["taskId"])'
}
