#!/usr/bin/env bash
# How polls and creates cost with many live tasks: on a fresh `taskmesh serve` per case, the
# poll scenario creates SMALL (then LARGE) live tasks of an hour and polls them, then the
# create scenario adds tasks of no work beside them; rounds alternate the two cases.
#
#   benches/live_scale.sh [ROUNDS] [SMALL] [LARGE] [SECONDS]     defaults: 2 100 100000 10
#
# Prints per round the polls and creates per second of each case and LARGE against SMALL.
# Builds in release mode.
set -euo pipefail
rounds=${1:-2}
small=${2:-100}
large=${3:-100000}
seconds=${4:-10}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
loadgen=$root/target/release/loadgen
config=$(printf '[tasks]\nmax_live_tasks = %s\n' $((large + 200000)))

rate() {
    python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["per_s"]))' "$1"
}

# One case: LIVE live tasks polled, then creates beside them; prints "polls creates".
one_case() {
    start_serve "$root/target/release/taskmesh" "$config"
    "$loadgen" --url "$url" --scenario poll --tasks "$1" --duration-s "$seconds" \
        --sessions 16 --concurrency 64 --json "$work/p.json" >/dev/null
    "$loadgen" --url "$url" --scenario create --task-seconds 0 --duration-s "$seconds" \
        --sessions 16 --concurrency 256 --json "$work/c.json" >/dev/null
    stop_serve
    echo "$(rate "$work/p.json") $(rate "$work/c.json")"
}

for r in $(seq "$rounds"); do
    read -r ps cs < <(one_case "$small")
    read -r pl cl < <(one_case "$large")
    python3 - "$r" "$small" "$large" "$ps" "$cs" "$pl" "$cl" <<'PY'
import sys
r, small, large, ps, cs, pl, cl = sys.argv[1:]
ps, cs, pl, cl = map(int, (ps, cs, pl, cl))
print(f"round {r}  polls {small} live {ps}/s, {large} live {pl}/s ({100*pl/ps:.1f} %)   "
      f"creates {small} live {cs}/s, {large} live {cl}/s ({100*cl/cs:.1f} %)")
PY
done
