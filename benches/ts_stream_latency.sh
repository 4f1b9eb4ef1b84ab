#!/usr/bin/env bash
# Stream latency as the TypeScript SDK 1.32.2 client sees it (benches/ts_stream_latency.mjs)
# against one `taskmesh serve` with `tasks.poll_interval_ms = 20` (the SDK's task stream sleeps
# a whole poll interval between polls, which would hide the server's own delay).
#
#   benches/ts_stream_latency.sh [ROUNDS]
#
# Installs the SDK with npm under target/ts-bench the first time; SERVER_BIN picks another
# server binary.
set -euo pipefail
rounds=${1:-200}
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
start_serve "$server" $'[tasks]\npoll_interval_ms = 20'
node "$dir/ts_stream_latency.mjs" "$url" "$rounds"
