#!/usr/bin/env bash
# Stream latency as the MCP Python SDK 1.30.0 client sees it (benches/py_stream_latency.py)
#
#   benches/py_stream_latency.sh single  [ROUNDS]   one `taskmesh serve`
#   benches/py_stream_latency.sh cluster [ROUNDS]   3 nodes, the client on node 2 (tasks on
#                                                   every shard: most led by another node)
#
# Installs the SDK in a virtualenv under target/py-bench the first time; SERVER_BIN picks
# another server binary.
set -euo pipefail
mode=${1:-single}
rounds=${2:-200}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh)
server=${SERVER_BIN:-$root/target/release/taskmesh}
venv=$root/target/py-bench
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet mcp==1.30.0
fi
case "$mode" in
single) start_serve "$server" ;;
cluster)
    start_cluster3 "$server"
    url=$(url_of 2)
    ;;
*)
    echo "usage: $0 single|cluster [ROUNDS]" >&2
    exit 2
    ;;
esac
"$venv/bin/python" "$root/benches/py_stream_latency.py" "$url" "$rounds"
report_delivery "$mode"
