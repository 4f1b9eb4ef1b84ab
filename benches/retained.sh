#!/usr/bin/env bash
# How polls and creates cost with many retained (terminal) tasks: one data directory is filled
# once with LARGE tasks of no work; then each round runs the same load on a fresh server (SMALL
# retained: the poll scenario's own SMALL live tasks) and on a server reopened on the filled
# directory, after QUIET_S seconds of rest (its disk write-back and compactions settled).
#
#   benches/retained.sh [ROUNDS] [SMALL] [LARGE] [SECONDS]      defaults: 2 1000 1000000 10
#
# Per case: `loadgen --scenario poll --tasks SMALL` for SECONDS, then `--scenario create
# --task-seconds 0 --concurrency 256` for SECONDS. Prints per round both cases' polls and
# creates per second, LARGE against SMALL, the server's CPU per poll and per create, and RSS.
# Builds in release mode.
set -euo pipefail
rounds=${1:-2}
small=${2:-1000}
large=${3:-1000000}
seconds=${4:-10}
quiet=${QUIET_S:-60}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
loadgen=$root/target/release/loadgen
server=$root/target/release/taskmesh
# Tasks live a day (the bench outlasts the default hour), and none is refused as too many.
config=$(printf '[tasks]\ndefault_ttl_ms = 86400000\nmax_live_tasks = 200000\n')
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# Fill: creates of no work until LARGE have been answered.
start_serve "$server" "$config"
filled=$data
made=0
while [ "$made" -lt "$large" ]; do
    "$loadgen" --url "$url" --scenario create --task-seconds 0 --duration-s 30 \
        --sessions 16 --concurrency 256 --json "$work/fill.json" >/dev/null
    made=$((made + $(field "$work/fill.json" ok)))
done
stop_serve
echo "filled: $made tasks, $(du -sh "$filled" | cut -f1) on disk"

# One case on the running server: prints "polls/s µs/poll creates/s µs/create RSS_MiB".
one_case() {
    local hz t0 t1 t2 p c
    hz=$(getconf CLK_TCK)
    t0=$(ticks "$pid")
    "$loadgen" --url "$url" --scenario poll --tasks "$small" --duration-s "$seconds" \
        --sessions 16 --concurrency 64 --json "$work/p.json" >/dev/null
    t1=$(ticks "$pid")
    "$loadgen" --url "$url" --scenario create --task-seconds 0 --duration-s "$seconds" \
        --sessions 16 --concurrency 256 --json "$work/c.json" >/dev/null
    t2=$(ticks "$pid")
    p=$(field "$work/p.json" ok)
    c=$(field "$work/c.json" ok)
    # The poll run's CPU includes creating its SMALL tasks; polls far outnumber them.
    echo "$(field "$work/p.json" per_s) $(((t1 - t0) * 1000000 / hz / p)) \
$(field "$work/c.json" per_s) $(((t2 - t1) * 1000000 / hz / c)) \
$(($(awk '/VmRSS/{print $2}' "/proc/$pid/status") / 1024))"
}

for r in $(seq "$rounds"); do
    start_serve "$server" "$config"
    read -r ps pus cs cus rs < <(one_case)
    stop_serve
    start_serve "$server" "$config" "$filled"
    sleep "$quiet"
    read -r pl pul cl cul rl < <(one_case)
    stop_serve
    python3 - "$r" "$small" "$made" "$ps" "$pus" "$cs" "$cus" "$rs" "$pl" "$pul" "$cl" "$cul" "$rl" <<'PY'
import sys
r, small, large = sys.argv[1:4]
ps, pus, cs, cus, rs, pl, pul, cl, cul, rl = map(float, sys.argv[4:])
print(f"round {r}  polls: {small} retained {ps:.0f}/s ({pus:.0f} µs), {large}+ retained "
      f"{pl:.0f}/s ({pul:.0f} µs), {100*pl/ps:.1f} %   creates: {cs:.0f}/s ({cus:.0f} µs), "
      f"{cl:.0f}/s ({cul:.0f} µs), {100*cl/cs:.1f} %   RSS {rs:.0f} / {rl:.0f} MiB")
PY
done
