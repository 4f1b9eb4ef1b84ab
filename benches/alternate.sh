#!/usr/bin/env bash
# Compare the CPU cost of a single-node poll between builds, in alternating rounds, so that a
# machine whose speed drifts during the session shifts every build alike.
#
#   benches/alternate.sh ROUNDS BIN_DIR [BIN_DIR ...]
#
# Each BIN_DIR holds a release `taskmesh` and `loadgen` (for another commit: a separate
# checkout built with `cargo build --release -p taskmesh -p taskmesh-bench --bins`). Per round
# and build: a fresh `taskmesh serve` on a loopback port with a temporary data directory, a
# 3 s warm-up, then a 10 s poll run (16 sessions, 64 workers, 1000 tasks); it prints the polls
# per second and the server's CPU time per answered poll (/proc/PID/stat, user + system), and
# at the end the median of each build.
set -euo pipefail
load=(--scenario poll --sessions 16 --concurrency 64 --tasks 1000)
. "$(dirname "$0")/common.sh"
rounds_and_dirs "$@"
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

one_run() { # BIN_DIR -> "polls/s µs/poll"
    local bin=$1 data
    start_serve "$bin/taskmesh"
    data=$(mktemp -d -p "$work")
    "$bin/loadgen" --url "$url" --target warmup "${load[@]}" --duration-s 3 \
        --json "$data.warm.json" >/dev/null
    local before after
    before=$(ticks "$pid")
    "$bin/loadgen" --url "$url" --target run "${load[@]}" --duration-s 10 \
        --json "$data.json" >/dev/null
    after=$(ticks "$pid")
    stop_serve
    python3 - "$data.json" "$(getconf CLK_TCK)" "$before" "$after" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
tick, before, after = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"{r['per_s']:.0f} {(after - before) / tick / max(r['ok'], 1) * 1e6:.2f}")
PY
}

results=$work/results
: >"$results"
for r in $(seq 1 "$rounds"); do
    for d in "${dirs[@]}"; do
        line=$(one_run "$d")
        echo "round $r  $d  ${line% *} polls/s  ${line#* } µs/poll"
        echo "$d $line" >>"$results"
    done
done
python3 - "$results" <<'PY'
import statistics, sys
by = {}
for line in open(sys.argv[1]):
    d, rate, us = line.split()
    by.setdefault(d, []).append((float(rate), float(us)))
for d, runs in by.items():
    print(f"median  {d}  {statistics.median(r for r, _ in runs):.0f} polls/s  "
          f"{statistics.median(u for _, u in runs):.2f} µs/poll  ({len(runs)} runs)")
PY
