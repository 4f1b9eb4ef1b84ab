#!/usr/bin/env bash
# What metrics cost: polls and durable creates on one `taskmesh serve` with `[metrics]
# enabled = false` against the default (metrics on, scraped every second by curl while the
# load runs, as a Prometheus would), in alternating rounds so a drifting machine shifts both.
#
#   benches/observability.sh [ROUNDS] [DURATION_S]       defaults: 3 rounds of 10 s
#
# Polls: 1000 running tasks, 16 sessions, 64 workers. Creates: 16 sessions, 256 workers.
# Each run follows a 3 s warm-up; prints ops/s, p50 and p99, and at the end the mean of each
# setting and the on/off ratio per scenario.
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
    if [ "${name%%-*}" = on ]; then
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
for r in $(seq 1 "$rounds"); do
    echo "round $r"
    run off-poll "$off" "${poll[@]}"
    run on-poll "" "${poll[@]}"
    run off-create "$off" "${create[@]}"
    run on-create "" "${create[@]}"
done
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
    print(f"{kind}: metrics on at {100 * mean[f'on-{kind}'] / mean[f'off-{kind}']:.1f} % of off")
PY
