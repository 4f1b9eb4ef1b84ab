#!/usr/bin/env bash
# What tasks run by workers cost, with `worker_bench` (benches/src/bin/worker_bench.rs):
#
#   latency     dispatch latency (a create's answer to the lease in a waiting worker's poll),
#               at a low open-loop rate, so that every task finds a worker waiting
#   workers     throughput of worker tasks of no work: create, lease, complete, all durable,
#               CONCURRENCY creators in a closed loop, 4 workers of 64 places
#   built-in    the same creators with the built-in slow_compute of 0 seconds (create and
#               finish, durable), in the same run, for comparison
#
#   benches/workers.sh single  [SECONDS] [CONCURRENCY]   one `taskmesh serve`
#   benches/workers.sh cluster [SECONDS] [CONCURRENCY]   3 nodes (cluster/start.sh), sessions
#                                                        and workers on all of them
#
# Builds in release mode.
set -euo pipefail
mode=${1:-single}
seconds=${2:-10}
concurrency=${3:-256}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
server=$root/target/release/taskmesh
bench=$root/target/release/worker_bench
config="$work/workers.toml"
cat >"$config" <<CONF
[tasks]
max_live_tasks = 200000
[workers]
max_queued_per_tool = 200000
[workers.tokens]
"bench-worker-token" = "bench"
[workers.identities.bench]
tools = ["bench_noop"]
CONF
case "$mode" in
single)
    start_serve "$server" "$(cat "$config")"
    urls=$url
    ;;
cluster)
    NODE_EXTRA_CONFIG=$config start_cluster3 "$server"
    urls="$(url_of 1),$(url_of 2),$(url_of 3)"
    ;;
*)
    echo "usage: $0 single|cluster [SECONDS] [CONCURRENCY]" >&2
    exit 2
    ;;
esac
common=(--url "$urls" --worker-token bench-worker-token --duration-s "$seconds" --sessions 16)
echo "== latency: 200 tasks/s offered, 4 workers waiting"
"$bench" "${common[@]}" --rate 200
echo "== workers: $concurrency creators, 4 workers"
"$bench" "${common[@]}" --concurrency "$concurrency"
echo "== built-in: $concurrency creators, slow_compute(0)"
"$bench" "${common[@]}" --concurrency "$concurrency" --builtin
