#!/usr/bin/env bash
# Stream latency as a client sees it (see benches/src/bin/stream_latency.rs): the status
# notification on the GET stream and the result on an open tasks/result stream, after the
# client's answer to a task's elicitation; then the delivery delays the servers measured
# (benches/delivery.py).
#
#   benches/stream_latency.sh single  [ROUNDS]   one `taskmesh serve`
#   benches/stream_latency.sh cluster [ROUNDS]   3 nodes: requests to node 1, the GET stream
#                                                on node 2 (tasks on every shard)
#
# Builds in release mode; SERVER_BIN picks another server binary (an older build, say).
set -euo pipefail
mode=${1:-single}
rounds=${2:-200}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
server=${SERVER_BIN:-$root/target/release/taskmesh}
case "$mode" in
single)
    start_serve "$server"
    urls=(--url "$url")
    ;;
cluster)
    start_cluster3 "$server"
    urls=(--url "$(url_of 1)" --get-url "$(url_of 2)")
    ;;
*)
    echo "usage: $0 single|cluster [ROUNDS]" >&2
    exit 2
    ;;
esac
"$root/target/release/stream_latency" "${urls[@]}" --rounds "$rounds"
report_delivery "$mode"
