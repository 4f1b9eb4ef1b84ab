#!/usr/bin/env bash
# What metrics and traces cost: polls and durable creates on one `taskmesh serve` in three
# settings, in alternating rounds so a drifting machine shifts all of them:
#   off     `[metrics] enabled = false`, no `[tracing]`;
#   on      metrics on (the default), scraped every second by curl as a Prometheus would;
#   traced  metrics on and scraped, and `[tracing]` exporting 1 % of requests over OTLP/HTTP
#           to benches/otlp_sink.py (a sink that takes the spans and counts them).
#
#   benches/observability.sh [ROUNDS] [DURATION_S]       defaults: 3 rounds of 10 s
#
# Polls: 1000 running tasks, 16 sessions, 64 workers. Creates: 16 sessions, 256 workers.
# Each run follows a 3 s warm-up; prints ops/s, p50 and p99, and at the end the mean of each
# setting and its ratio to off per scenario.
set -euo pipefail
rounds=${1:-3}
secs=${2:-10}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
bin=$root/target/release
results=$work/results
: >"$results"

run() { # NAME CONFIG LOADGEN-ARGS...
    local name=$1 config=$2 scraper=
    shift 2
    start_serve "$bin/taskmesh" "$config"
    "$bin/loadgen" --url "$url" "$@" --duration-s 3 --target warmup >/dev/null
    if [ "${name%%-*}" != off ]; then
        (while true; do curl -s "http://127.0.0.1:$port/metrics" >/dev/null; sleep 1; done) &
        scraper=$!
    fi
    "$bin/loadgen" --url "$url" "$@" --duration-s "$secs" --target "$name" \
        --json "$work/run.json" >/dev/null
    [ -z "$scraper" ] || kill "$scraper"
    stop_serve
    python3 - "$work/run.json" "$name" <<'PY' | tee -a "$results"
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency_ms"]
print(f"{sys.argv[2]} {r['per_s']:.0f} p50={l['p50']:.3f} p99={l['p99']:.3f} failures={sum(r['failures'].values())}")
PY
}

poll=(--scenario poll --sessions 16 --concurrency 64 --tasks 1000)
create=(--scenario create --sessions 16 --concurrency 256)
off=$'[metrics]\nenabled = false'
sink_port=$(free_port)
python3 "$root/benches/otlp_sink.py" "$sink_port" &
sink=$!
bench_pids+=("$sink")
wait_port "$sink_port"
traced=$'[tracing]\notlp_endpoint = "http://127.0.0.1:'"$sink_port"$'"\nsample_ratio = 0.01'
for r in $(seq 1 "$rounds"); do
    echo "round $r"
    run off-poll "$off" "${poll[@]}"
    run on-poll "" "${poll[@]}"
    run traced-poll "$traced" "${poll[@]}"
    run off-create "$off" "${create[@]}"
    run on-create "" "${create[@]}"
    run traced-create "$traced" "${create[@]}"
done
kill "$sink"
wait "$sink" 2>/dev/null || true
python3 - "$results" <<'PY'
import sys
runs = {}
for line in open(sys.argv[1]):
    name, rate = line.split()[:2]
    runs.setdefault(name, []).append(float(rate))
mean = {n: sum(v) / len(v) for n, v in runs.items()}
for n, v in runs.items():
    print(f"{n}: mean {mean[n]:.0f}/s over {len(v)} runs")
for kind in ("poll", "create"):
    print(f"{kind}: metrics on at {100 * mean[f'on-{kind}'] / mean[f'off-{kind}']:.1f} % of off, "
          f"metrics and 1 % traced at {100 * mean[f'traced-{kind}'] / mean[f'off-{kind}']:.1f} %")
PY
