#!/usr/bin/env bash
# What serving a tool through an upstream costs. The upstream is a `taskmesh serve` with the
# built-in tools (its `greet` answers at once, so the figures are taskmesh's own cost); the
# front serves it as `up_greet` over Streamable HTTP. One loadgen client, same run:
#
#   direct      plain tools/call of greet at the upstream
#   proxied     plain tools/call of up_greet at the front
#   as a task   tools/call of up_greet as a task, then tasks/result (call to result)
#   and the throughput of CONCURRENCY such tasks in flight at once;
#   polls       tasks/get of 1,000 running tasks of up_slow_compute (the upstream runs each as
#               its own task, which the front follows), then of 1,000 of the front's built-in
#               slow_compute, same settings.
#
#   benches/upstream.sh single  [SECONDS] [CONCURRENCY]   the front is one `taskmesh serve`
#   benches/upstream.sh cluster [SECONDS] [CONCURRENCY]   the front is 3 nodes, sessions on all
#
# Builds in release mode.
set -euo pipefail
mode=${1:-single}
seconds=${2:-10}
concurrency=${3:-1000}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
server=$root/target/release/taskmesh
loadgen=$root/target/release/loadgen

start_serve "$server" '[tasks]
max_live_tasks = 100000'
upstream=$url
front_config="$work/front.toml"
cat >"$front_config" <<CONF
[tools]
builtin = true

[[upstream]]
name = "bench"
url = "$upstream"
prefix = "up_"
max_concurrent_calls = $concurrency
CONF
case "$mode" in
single)
    start_serve "$server" "$(cat "$front_config")"
    front=(--url "$url")
    ;;
cluster)
    NODE_EXTRA_CONFIG=$front_config start_cluster3 "$server"
    front=(--url "$(url_of 1),$(url_of 2),$(url_of 3)")
    ;;
*)
    echo "usage: $0 single|cluster [SECONDS] [CONCURRENCY]" >&2
    exit 2
    ;;
esac
one=(--duration-s "$seconds" --sessions 1 --concurrency 1)
echo "== direct: greet at the upstream, 1 client"
"$loadgen" --url "$upstream" --scenario call --tool greet --target upstream "${one[@]}"
echo "== proxied: up_greet at the front, plain, 1 client"
"$loadgen" "${front[@]}" --scenario call --tool up_greet --target front "${one[@]}"
echo "== as a task: up_greet at the front, call to result, 1 client"
"$loadgen" "${front[@]}" --scenario task --tool up_greet --target front "${one[@]}"
echo "== as a task: $concurrency in flight"
"$loadgen" "${front[@]}" --scenario task --tool up_greet --target front \
    --duration-s "$seconds" --sessions 32 --concurrency "$concurrency"
polls=(--duration-s "$seconds" --sessions 16 --concurrency 64 --tasks 1000 --task-seconds 3600)
echo "== polls: 1000 running tasks of up_slow_compute (followed upstream), 64 clients"
"$loadgen" "${front[@]}" --scenario poll --poll-tool up_slow_compute --target front "${polls[@]}"
echo "== polls: 1000 running tasks of the built-in slow_compute, 64 clients"
"$loadgen" "${front[@]}" --scenario poll --poll-tool slow_compute --target front "${polls[@]}"
