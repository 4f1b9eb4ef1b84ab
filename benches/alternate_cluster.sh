#!/usr/bin/env bash
# Compare builds on a 3-node cluster in alternating rounds, so that a machine whose speed drifts
# during the session shifts every build alike: forwarded polls (through a node that leads none
# of the polled shards) with the CPU they cost on that node and on the leaders, and durable
# creates through every node.
#
#   benches/alternate_cluster.sh ROUNDS BIN_DIR [BIN_DIR ...]
#
# Each BIN_DIR holds a release `taskmesh` (for another commit: a separate checkout built with
# `cargo build --release -p taskmesh -p taskmesh-bench --bins`). The load generator is the
# first BIN_DIR's `loadgen` for every build, so that only the server differs. Per round and
# build: a fresh cluster (cluster/start.sh, SHARDS shards, default 32), QUIET_S seconds
# (default 30) for the groups to settle on their preferred leaders, a 3 s warm-up and a 10 s
# run of forwarded polls (16 sessions, 64 workers, 1000 tasks, `--remote-only`), then a 10 s
# run of durable creates (18 sessions, 256 workers, spread over the three nodes). It prints
# polls/s, the CPU time per answered poll on node 1 (the gateway, which leads none of the
# polled shards) and on nodes 2 and 3 together (the leaders), and creates/s; at the end the
# median of each figure per build. CPU times are read from /proc/PID/stat (user + system).
set -euo pipefail
shards=${SHARDS:-32}
quiet=${QUIET_S:-30}
. "$(dirname "$0")/common.sh"
rounds_and_dirs "$@"
loadgen=${dirs[0]}/loadgen

one_run() { # BIN_DIR -> "polls/s gateway_us leaders_us creates/s"
    local bin=$1 out
    out=$(mktemp -d -p "$work")
    printf '[tasks]\nmax_live_tasks = 100000\n' >"$out/extra.toml"
    NODE_EXTRA_CONFIG=$out/extra.toml SHARDS=$shards start_cluster3 "$bin/taskmesh"
    sleep "$quiet"
    local u1 u2 u3
    u1=$(url_of 1) u2=$(url_of 2) u3=$(url_of 3)
    local poll=(--url "$u1" --scenario poll --sessions 16 --concurrency 64 --tasks 1000
        --remote-only --shards "$shards")
    "$loadgen" --target warmup "${poll[@]}" --duration-s 3 --json "$out/warm.json" >/dev/null
    local g0 l0 g1 l1
    read -r g0 l0 < <(cluster_cpu)
    "$loadgen" --target run "${poll[@]}" --duration-s 10 --json "$out/poll.json" >/dev/null
    read -r g1 l1 < <(cluster_cpu)
    "$loadgen" --target create --url "$u1" --url "$u2" --url "$u3" --scenario create \
        --sessions 18 --concurrency 256 --duration-s 10 --json "$out/create.json" >/dev/null
    "$root/cluster/stop.sh" "$bench_cluster" >/dev/null 2>&1 || true
    rm -rf "$bench_cluster"
    bench_cluster=
    python3 - "$out" "$(getconf CLK_TCK)" "$g0" "$g1" "$l0" "$l1" <<'PY'
import json, sys
out, tick = sys.argv[1], int(sys.argv[2])
g0, g1, l0, l1 = map(int, sys.argv[3:7])
poll = json.load(open(f"{out}/poll.json"))
create = json.load(open(f"{out}/create.json"))
n = max(poll["ok"], 1)
print(f'{poll["per_s"]:.0f} {(g1 - g0) / tick * 1e6 / n:.2f} {(l1 - l0) / tick * 1e6 / n:.2f} '
      f'{create["per_s"]:.0f}')
PY
}

declare -A results
for r in $(seq 1 "$rounds"); do
    for d in "${dirs[@]}"; do
        line=$(one_run "$d")
        results[$d]+="$line"$'\n'
        echo "round $r $d: polls/s gateway-us/poll leaders-us/poll creates/s = $line"
    done
done
echo "median per build (polls/s, gateway us/poll, leaders us/poll, creates/s):"
for d in "${dirs[@]}"; do
    printf '%s' "${results[$d]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
cols = list(zip(*rows))
print(sys.argv[1], " ".join(f"{statistics.median(c):.2f}" for c in cols))' "$d"
done
