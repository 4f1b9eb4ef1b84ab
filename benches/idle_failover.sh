#!/usr/bin/env bash
# Failover of idle shards: a 3-node cluster (cluster/start.sh) with each shard count given is
# left alone for WARMUP_S seconds (its groups quiesce), then node 2 is killed with SIGKILL and
# nodes 1 and 3 are asked for their GET /status every 50 ms until both name the same leader,
# node 1 or 3, for every shard. Prints how many shards node 2 led, and the time from the kill
# until the last of them was led again as both survivors see it.
#
#   benches/idle_failover.sh [SHARDS...]      defaults: 32 1024
#
# Environment: WARMUP_S (default 45).
set -euo pipefail
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(32 1024)
warmup=${WARMUP_S:-45}
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh)

for shards in "${counts[@]}"; do
    dir=$work/cluster-$shards
    bench_cluster=$dir
    base=$((20000 + RANDOM % 20000))
    SHARDS=$shards NODE_BIN=$root/target/release/taskmesh BASE_PORT=$base \
        "$root/cluster/start.sh" 3 "$dir" >/dev/null
    sleep "$warmup"
    python3 - "$base" "$(cat "$dir/node-2.pid")" "$shards" <<'EOF'
import json, os, signal, sys, time, urllib.request

base, victim, shards = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def status(node):
    with urllib.request.urlopen(f"http://127.0.0.1:{base + node}/status", timeout=5) as r:
        return {s["shard"]: s for s in json.load(r)["shards"]}

before = status(1)
led = sorted(s for s, row in before.items() if row["leader"] == 2)
quiet = sum(1 for row in before.values() if row.get("quiet"))
os.kill(victim, signal.SIGKILL)
killed = time.monotonic()
while True:
    try:
        views = [status(1), status(3)]
    except OSError:
        views = None
    if views and all(
        views[0][s]["leader"] in (1, 3) and views[0][s]["leader"] == views[1][s]["leader"]
        for s in led
    ):
        break
    if time.monotonic() - killed > 60:
        sys.exit(f"shards={shards}: node 2's shards not all led again after 60 s")
    time.sleep(0.05)
elapsed = time.monotonic() - killed
print(f"shards={shards} quiet-before={quiet}/{len(before)} led-by-node-2={len(led)} "
      f"all-led-again-after={elapsed * 1000:.0f} ms")
EOF
    "$root/cluster/stop.sh" "$dir" >/dev/null 2>&1 || true
    bench_cluster=
done
