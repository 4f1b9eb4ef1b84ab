#!/usr/bin/env bash
# What TLS costs polls, in alternating rounds (so a machine whose speed drifts shifts both
# sides alike):
#
#   single   `taskmesh serve` over plain HTTP, then the same with [http.tls] (loadgen over
#            HTTPS, trusting a throwaway authority from `taskmesh certs`)
#   cluster  a 3-node cluster (cluster/start.sh) with cluster.insecure = true, then with
#            mutual TLS between the nodes (the default), polled through node 1 with
#            --remote-only, so every poll takes the gRPC hop to another node's leader
#
#   benches/tls.sh [ROUNDS] [DURATION_S]      defaults: 2 rounds of 10 s
#
# Each run polls 1000 running tasks (16 sessions, 64 workers) after a 3 s warm-up and prints
# polls/s, p50 and p99; at the end, the mean of each setting and the TLS/plain ratio.
set -euo pipefail
rounds=${1:-2}
secs=${2:-10}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
bin=$root/target/release
load=(--scenario poll --sessions 16 --concurrency 64 --tasks 1000)
"$bin/taskmesh" certs --out "$work/certs" --node 1 --host 127.0.0.1 >/dev/null
results=$work/results
: >"$results"

# loadgen ARGS... on `target`: a warm-up, then the measured run; appends "target polls/s" to
# the results and prints the run's figures.
measure() {
    local target=$1
    shift
    "$bin/loadgen" "$@" "${load[@]}" --duration-s 3 --target warmup >/dev/null
    "$bin/loadgen" "$@" "${load[@]}" --duration-s "$secs" --target "$target" \
        --json "$work/run.json" >/dev/null
    python3 - "$work/run.json" "$target" <<'PY' | tee -a "$results"
import json, sys
r = json.load(open(sys.argv[1]))
l = r["latency_ms"]
bad = sum(r["failures"].values())
print(f"{sys.argv[2]} {r['per_s']:.0f} p50={l['p50']:.3f} p99={l['p99']:.3f} failures={bad}")
PY
}

single() {
    start_serve "$bin/taskmesh"
    measure single-plain --url "$url"
    stop_serve
    start_serve "$bin/taskmesh" "[http.tls]
cert_file = \"$work/certs/node-1.pem\"
key_file = \"$work/certs/node-1.key\""
    measure single-tls --url "https://127.0.0.1:$port/mcp" --ca "$work/certs/ca.pem"
    stop_serve
}

cluster() { # INSECURE (empty for mutual TLS) and the target's name
    rm -rf "$work/cluster"
    INSECURE=$1 start_cluster3 "$bin/taskmesh"
    measure "$2" --url "$(url_of 1)" --remote-only --shards 32
    "$root/cluster/stop.sh" "$work/cluster" >/dev/null
}

for r in $(seq 1 "$rounds"); do
    echo "round $r"
    single
    cluster 1 cluster-plain
    cluster "" cluster-mtls
done
python3 - "$results" <<'PY'
import sys
runs = {}
for line in open(sys.argv[1]):
    target, rate = line.split()[:2]
    runs.setdefault(target, []).append(float(rate))
mean = {t: sum(v) / len(v) for t, v in runs.items()}
for t, v in runs.items():
    print(f"{t}: mean {mean[t]:.0f} polls/s over {len(v)} runs")
for kind in ("single", "cluster"):
    plain, tls = mean.get(f"{kind}-plain"), mean.get(f"{kind}-tls") or mean.get(f"{kind}-mtls")
    if plain and tls:
        print(f"{kind}: TLS at {100 * tls / plain:.1f} % of plain")
PY
