#!/usr/bin/env bash
# Run the load generator's scenario against the FastMCP peer: installs FastMCP 3.4.11 with its
# tasks extra into its own virtualenv (under target/), serves benches/fastmcp_peer.py on a
# loopback port, runs `loadgen --target fastmcp` with the arguments given, and stops the peer.
#
#   benches/fastmcp_peer.sh --scenario poll --duration-s 10 --concurrency 64 --tasks 1000
#
# Environment: PORT (default 9300), LOADGEN (default: build and use target/release/loadgen).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/target/fastmcp-venv"
port=${PORT:-9300}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import fastmcp, sys; sys.exit(fastmcp.__version__ != "3.4.11")' 2>/dev/null; then
    "$venv/bin/pip" install -q "fastmcp[tasks]==3.4.11"
fi
loadgen=${LOADGEN:-}
if [ -z "$loadgen" ]; then
    (cd "$root" && cargo build --release -q -p taskmesh-bench --bin loadgen)
    loadgen="$root/target/release/loadgen"
fi
"$venv/bin/python" "$root/benches/fastmcp_peer.py" --port "$port" &
peer=$!
trap 'kill $peer 2>/dev/null; wait $peer 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
"$loadgen" --url "http://127.0.0.1:$port/mcp" --target fastmcp "$@"
