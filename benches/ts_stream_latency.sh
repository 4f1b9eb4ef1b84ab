#!/usr/bin/env bash
# Stream latency as the TypeScript SDK 1.32.2 client sees it (benches/ts_stream_latency.mjs)
# against taskmesh with `tasks.poll_interval_ms = 20` (the SDK's task stream sleeps
# a whole poll interval between polls, which would hide the server's own delay).
#
#   benches/ts_stream_latency.sh single  [ROUNDS]   one `taskmesh serve`
#   benches/ts_stream_latency.sh cluster [ROUNDS]   3 nodes (the same poll interval), the client
#                                                   on node 2 (tasks on every shard)
#
# Installs the SDK with npm under target/ts-bench the first time; SERVER_BIN picks another
# server binary.
set -euo pipefail
mode=${1:-single}
rounds=${2:-200}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh)
server=${SERVER_BIN:-$root/target/release/taskmesh}
dir=$root/target/ts-bench
if [ ! -f "$dir/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
    mkdir -p "$dir"
    echo '{"private":true,"type":"module"}' >"$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --silent @modelcontextprotocol/sdk@1.32.2)
fi
cp "$root/benches/ts_stream_latency.mjs" "$dir/"
case "$mode" in
single) start_serve "$server" $'[tasks]\npoll_interval_ms = 20' ;;
cluster)
    TASKMESH_TASKS__POLL_INTERVAL_MS=20 start_cluster3 "$server"
    url=$(url_of 2)
    ;;
*)
    echo "usage: $0 single|cluster [ROUNDS]" >&2
    exit 2
    ;;
esac
node "$dir/ts_stream_latency.mjs" "$url" "$rounds"
report_delivery "$mode"
