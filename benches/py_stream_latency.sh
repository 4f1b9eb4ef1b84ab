#!/usr/bin/env bash
# Stream latency as the MCP Python SDK 1.30.0 client sees it (benches/py_stream_latency.py)
# against one `taskmesh serve`.
#
#   benches/py_stream_latency.sh [ROUNDS]
#
# Installs the SDK in a virtualenv under target/py-bench the first time; SERVER_BIN picks
# another server binary.
set -euo pipefail
rounds=${1:-200}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh)
server=${SERVER_BIN:-$root/target/release/taskmesh}
venv=$root/target/py-bench
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet mcp==1.30.0
fi
start_serve "$server"
"$venv/bin/python" "$root/benches/py_stream_latency.py" "$url" "$rounds"
