#!/usr/bin/env bash
# What task events to a webhook cost, with `webhook_sink` (benches/src/bin/webhook_sink.rs,
# a receiver that answers 204 at once and measures each event's lag from its status change):
#
#   lag       one creator of tasks of no work (slow_compute of 0 s) in a closed loop, a
#             webhook of their ends: the delivery lag, status change to the receiver's answer
#   creates   ROUNDS alternating runs of CONCURRENCY creators of the same tasks, without a
#             webhook and with one, each on a fresh server: durable creates per second
#
#   benches/webhooks.sh single  [SECONDS] [CONCURRENCY] [ROUNDS]   one `taskmesh serve`
#   benches/webhooks.sh cluster [SECONDS] [CONCURRENCY] [ROUNDS]   3 nodes (cluster/start.sh)
#
# Builds in release mode.
set -euo pipefail
mode=${1:-single}
seconds=${2:-10}
concurrency=${3:-256}
rounds=${4:-2}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
server=$root/target/release/taskmesh
loadgen=$root/target/release/loadgen

# A sink for one phase: its port in $sink_port, its pid in $sink_pid, its report in $1.
start_sink() {
    "$root/target/release/webhook_sink" >"$1" &
    sink_pid=$!
    bench_pids+=("$sink_pid")
    for _ in $(seq 100); do
        sink_port=$(awk '/^listening/ {print $2}' "$1")
        [ -n "$sink_port" ] && return 0
        sleep 0.1
    done
    echo "webhook_sink did not start" >&2
    exit 1
}

base=$'[tasks]\nmax_live_tasks = 200000'
hooked() {
    printf '%s\n[events]\nallow_addresses = ["127.0.0.0/8"]\nhttp_hosts = ["127.0.0.1"]\n\n[[webhooks]]\nname = "bench"\nurl = "http://127.0.0.1:%s/hook"\nsecret = "whsec_KioqKioqKioqKioqKioqKioqKioqKioq"\nterminal_only = true\n' "$base" "$1"
}

# Start the target(s) with config $1; the URLs in $urls.
start_target() {
    case "$mode" in
    single)
        start_serve "$server" "$1"
        urls=$url
        ;;
    cluster)
        printf '%s\n' "$1" >"$work/extra.toml"
        # Each cluster on ports of its own below the ephemeral range: a port the previous
        # cluster's connections left in TIME_WAIT cannot be listened on at once.
        starts=$((${starts:-0} + 1))
        BASE_PORT=$((20000 + 200 * starts)) NODE_EXTRA_CONFIG=$work/extra.toml start_cluster3 "$server"
        urls="$(url_of 1),$(url_of 2),$(url_of 3)"
        ;;
    *)
        echo "usage: $0 single|cluster [SECONDS] [CONCURRENCY] [ROUNDS]" >&2
        exit 2
        ;;
    esac
}

stop_target() {
    case "$mode" in
    single) stop_serve ;;
    cluster)
        "$root/cluster/stop.sh" "$bench_cluster" >/dev/null 2>&1 || true
        rm -rf "$bench_cluster"
        bench_cluster=
        ;;
    esac
}

# Durable creates of tasks of no work; prints the rate.
creates() {
    "$loadgen" --url "$urls" --target run --scenario create --task-seconds 0 \
        --duration-s "$seconds" --sessions 16 --concurrency "$1" --json "$work/c.json" >/dev/null
    python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["per_s"]))' "$work/c.json"
}

echo "== lag: 1 creator, a webhook of the ends"
start_sink "$work/sink-lag.txt"
start_target "$(hooked "$sink_port")"
echo "creates/s     $(creates 1)"
sleep 2
stop_target
kill "$sink_pid"
wait "$sink_pid" 2>/dev/null || true
tail -2 "$work/sink-lag.txt"

echo "== creates: $concurrency creators, without and with a webhook, $rounds rounds"
start_sink "$work/sink-load.txt"
for r in $(seq "$rounds"); do
    start_target "$base"
    without=$(creates "$concurrency")
    stop_target
    start_target "$(hooked "$sink_port")"
    with=$(creates "$concurrency")
    sleep 2
    stop_target
    echo "round $r      without $without/s  with $with/s  ($(python3 -c "print(round(100*$with/$without,1))") %)"
done
kill "$sink_pid"
wait "$sink_pid" 2>/dev/null || true
echo "-- what the sink saw under that load:"
tail -2 "$work/sink-load.txt"
