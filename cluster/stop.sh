#!/usr/bin/env bash
# Stop a local cluster started by cluster/start.sh: SIGTERM to every node (each hands over
# the leadership it holds, drains its streams and flushes its data), then wait for them.
#
#   cluster/stop.sh [DIR]             DIR defaults to ./cluster-data
set -euo pipefail
dir=${1:-./cluster-data}
shopt -s nullglob
pids=()
for f in "$dir"/node-*.pid; do
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        pids+=("$pid")
    fi
    rm -f "$f"
done
for pid in "${pids[@]}"; do
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "node pid $pid did not stop in 30 s; killing it" >&2
        kill -KILL "$pid" || true
    fi
done
echo "stopped ${#pids[@]} node(s)"
