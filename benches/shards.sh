#!/usr/bin/env bash
# Forwarded polls at two shard counts, side by side: per round, a fresh 3-node cluster
# (cluster/start.sh) with SMALL shards, then one with LARGE, each left QUIET_S seconds (default
# 45) for its groups to settle and quiesce, then a 3 s warm-up and a 10 s run of polls through
# node 1 of tasks on shards it does not lead (16 sessions, 64 workers, 1000 tasks,
# `--remote-only`). Prints polls/s and p99 of each run, the CPU time per answered poll on node
# 1 (the gateway) and on nodes 2 and 3 together (the leaders), from /proc/PID/stat, and how many
# groups node 1 saw quiet before and after the run; at the end each count's mean and LARGE's
# share of SMALL's.
#
#   benches/shards.sh [ROUNDS] [SMALL] [LARGE]      defaults: 2 32 1024
set -euo pipefail
rounds=${1:-2}
small=${2:-32}
large=${3:-1024}
quiet=${QUIET_S:-45}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
bin=$root/target/release

quiet_groups() { # URL of a node's MCP endpoint -> "quiet/all" as its GET /status shows them
    python3 - "${1%/mcp}/status" <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    shards = json.load(r)["shards"]
print(f'{sum(1 for s in shards if s.get("quiet"))}/{len(shards)}')
PY
}

one_run() { # SHARDS -> "polls/s p99_ms gateway_us leaders_us quiet_before quiet_after"
    local shards=$1 out
    out=$(mktemp -d -p "$work")
    SHARDS=$shards start_cluster3 "$bin/taskmesh"
    sleep "$quiet"
    local u1 before after
    u1=$(url_of 1)
    local poll=(--url "$u1" --scenario poll --sessions 16 --concurrency 64 --tasks 1000
        --remote-only --shards "$shards")
    "$bin/loadgen" --target warmup "${poll[@]}" --duration-s 3 --json "$out/warm.json" >/dev/null
    before=$(quiet_groups "$u1")
    local g0 l0 g1 l1
    read -r g0 l0 < <(cluster_cpu)
    "$bin/loadgen" --target run "${poll[@]}" --duration-s 10 --json "$out/poll.json" >/dev/null
    read -r g1 l1 < <(cluster_cpu)
    after=$(quiet_groups "$u1")
    "$root/cluster/stop.sh" "$bench_cluster" >/dev/null 2>&1 || true
    rm -rf "$bench_cluster"
    bench_cluster=
    python3 - "$out/poll.json" "$before" "$after" "$(getconf CLK_TCK)" "$g0" "$g1" "$l0" "$l1" <<'PY'
import json, sys
poll = json.load(open(sys.argv[1]))
failed = sum(poll["failures"].values())
assert failed == 0, f"{failed} polls failed: {poll['failures']}"
tick = int(sys.argv[4])
g0, g1, l0, l1 = map(int, sys.argv[5:9])
n = max(poll["ok"], 1)
print(f'{poll["per_s"]:.0f} {poll["latency_ms"]["p99"]:.2f} {(g1 - g0) / tick * 1e6 / n:.1f} '
      f'{(l1 - l0) / tick * 1e6 / n:.1f} {sys.argv[2]} {sys.argv[3]}')
PY
}

small_rates=() large_rates=()
for r in $(seq 1 "$rounds"); do
    line=$(one_run "$small")
    echo "round $r, $small shards: polls/s p99-ms gateway-us/poll leaders-us/poll quiet-before quiet-after = $line"
    small_rates+=("${line%% *}")
    line=$(one_run "$large")
    echo "round $r, $large shards: polls/s p99-ms gateway-us/poll leaders-us/poll quiet-before quiet-after = $line"
    large_rates+=("${line%% *}")
done
python3 - "$small" "$large" "${small_rates[*]}" "${large_rates[*]}" <<'PY'
import statistics, sys
small, large = sys.argv[1], sys.argv[2]
s = [float(x) for x in sys.argv[3].split()]
l = [float(x) for x in sys.argv[4].split()]
per_round = ", ".join(f"{b / a * 100:.1f} %" for a, b in zip(s, l))
print(f"mean: {small} shards {statistics.mean(s):.0f}/s, {large} shards {statistics.mean(l):.0f}/s: "
      f"{statistics.mean(l) / statistics.mean(s) * 100:.1f} % (per round: {per_round})")
PY
