#!/usr/bin/env bash
# What an idle cluster costs: a 3-node cluster (cluster/start.sh) with each shard count given,
# left alone for WARMUP_S seconds after its start, then measured over MEASURE_S seconds: the
# CPU each node process used (user + system, from /proc/PID/stat) as a share of one core, and
# its resident memory (VmRSS) at the end. No client sends anything.
#
#   benches/idle.sh [SHARDS...]      defaults: 32 256
#
# Environment: WARMUP_S (default 25), MEASURE_S (default 10).
set -euo pipefail
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(32 256)
warmup=${WARMUP_S:-25}
measure=${MEASURE_S:-10}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh)
ticks=$(getconf CLK_TCK)

cpu_ticks() { # PID: utime + stime in clock ticks
    awk '{print $14 + $15}' "/proc/$1/stat"
}

for shards in "${counts[@]}"; do
    dir=$work/cluster-$shards
    bench_cluster=$dir
    SHARDS=$shards NODE_BIN=$root/target/release/taskmesh BASE_PORT=$((20000 + RANDOM % 20000)) \
        "$root/cluster/start.sh" 3 "$dir" >/dev/null
    sleep "$warmup"
    declare -A before=()
    for i in 1 2 3; do
        before[$i]=$(cpu_ticks "$(cat "$dir/node-$i.pid")")
    done
    sleep "$measure"
    for i in 1 2 3; do
        pid=$(cat "$dir/node-$i.pid")
        used=$(( $(cpu_ticks "$pid") - before[$i] ))
        rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
        python3 -c "print(f'shards={$shards} node={$i} cpu={100 * $used / $ticks / $measure:.1f}% of a core rss={$rss_kib / 1024:.0f} MiB')"
    done
    "$root/cluster/stop.sh" "$dir" >/dev/null 2>&1 || true
    bench_cluster=
done
