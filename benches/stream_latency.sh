#!/usr/bin/env bash
# Stream latency as a client sees it (see benches/src/bin/stream_latency.rs): the status
# notification on the GET stream and the result on an open tasks/result stream, after the
# client's answer to a task's elicitation.
#
#   benches/stream_latency.sh single  [ROUNDS]   one `taskmesh serve`
#   benches/stream_latency.sh cluster [ROUNDS]   3 nodes: requests to node 1, the GET stream
#                                                on node 2 (tasks on every shard)
#
# Builds in release mode; SERVER_BIN picks another server binary (an older build, say).
set -euo pipefail
mode=${1:-single}
rounds=${2:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
server=${SERVER_BIN:-$root/target/release/taskmesh}
work=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ -f "$work/cluster/node-1.toml" ]; then
        "$root/cluster/stop.sh" "$work/cluster" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
case "$mode" in
single)
    port=$(free_port)
    "$server" serve --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    urls=(--url "http://127.0.0.1:$port/mcp")
    ;;
cluster)
    BASE_PORT=${BASE_PORT:-$(($(free_port) / 200 * 200 % 60000))} NODE_BIN=$server \
        "$root/cluster/start.sh" 3 "$work/cluster" >"$work/start.log"
    url_of() { awk -v n="node $1" '$0 ~ n {for(i=1;i<=NF;i++) if($i ~ /^http/) print $i}' "$work/start.log" | head -1; }
    urls=(--url "$(url_of 1)" --get-url "$(url_of 2)")
    sleep 8
    ;;
*)
    echo "usage: $0 single|cluster [ROUNDS]" >&2
    exit 2
    ;;
esac
"$root/target/release/stream_latency" "${urls[@]}" --rounds "$rounds"
