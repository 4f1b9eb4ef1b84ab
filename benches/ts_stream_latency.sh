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
root=$(cd "$(dirname "$0")/.." && pwd)
(cd "$root" && cargo build --release -q -p taskmesh)
server=${SERVER_BIN:-$root/target/release/taskmesh}
dir=$root/target/ts-bench
if [ ! -f "$dir/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
    mkdir -p "$dir"
    echo '{"private":true,"type":"module"}' >"$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --silent @modelcontextprotocol/sdk@1.32.2)
fi
cp "$root/benches/ts_stream_latency.mjs" "$dir/"
work=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
printf '[tasks]\npoll_interval_ms = 20\n' >"$work/config.toml"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$server" serve --config "$work/config.toml" --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
node "$dir/ts_stream_latency.mjs" "http://127.0.0.1:$port/mcp" "$rounds"
