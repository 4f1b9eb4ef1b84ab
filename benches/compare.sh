#!/usr/bin/env bash
# Measure taskmesh beside the ceiling (and the FastMCP peer) with the same load generator and
# the same settings, in one run, and print the ratios.
#
#   benches/compare.sh single  [LOADGEN ARGS]   ceiling, `taskmesh serve`, FastMCP peer
#   benches/compare.sh cluster [LOADGEN ARGS]   ceiling, a 3-node cluster polled through node 1
#                                               (only tasks of shards node 1 does not lead)
#
# LOADGEN ARGS default to: --scenario poll --duration-s 10 --sessions 16 --concurrency 64
# --tasks 1000. The ceiling answers with a body the size of a real taskmesh `tasks/get`
# answer, measured at the start of the run. The ceiling runs twice, with one runtime thread
# per core and with one thread, and the higher rate is the ceiling (so that a thread setting
# that suits this machine never flatters taskmesh). taskmesh reads its settings from the
# environment as usual (TASKMESH_WORKER_THREADS=1, say). Reports (JSON) go to OUT (default
# target/bench-results/MODE); SKIP_PEER=1 leaves out the FastMCP peer. After the taskmesh run
# it prints the CPU time each taskmesh process spent during it (/proc/PID/stat), per request
# answered. In single mode, with nginx and wrk installed, it then runs
# benches/nginx_ceiling.sh (taskmesh against nginx answering the same bytes, both polled by
# wrk; NGINX=0 leaves it out).
set -euo pipefail
mode=${1:-single}
shift || true
case "$mode" in single | cluster) ;; *)
    echo "usage: $0 single|cluster [loadgen args]" >&2
    exit 2
    ;;
esac
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--scenario poll --duration-s 10 --sessions 16 --concurrency 64 --tasks 1000)
. "$(dirname "$0")/common.sh"
bench_cluster=$work/cluster
out=${OUT:-$root/target/bench-results/$mode}
mkdir -p "$out"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
bin=$root/target/release
# Size in bytes of a tasks/get answer from the MCP endpoint $1.
answer_bytes() {
    local u=$1 t
    open_session "$u"
    t=$(long_task "$u")
    curl -s "${h[@]}" "$u" -d '{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"'"$t"'"}}' | wc -c
}

# CPU time (user + system, in clock ticks) of each process of $tm_pids, one line each.
cpu_ticks() {
    for p in "${tm_pids[@]}"; do
        awk '{print $14 + $15}' "/proc/$p/stat"
    done
}
if [ "$mode" = single ]; then
    port=$(free_port)
    "$bin/taskmesh" serve --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/taskmesh.log" 2>&1 &
    bench_pids+=($!)
    tm_pids=($!)
    wait_port "$port"
    url=http://127.0.0.1:$port/mcp
    extra=()
else
    BASE_PORT=${BASE_PORT:-$(($(free_port) / 200 * 200 % 60000))} NODE_BIN=$bin/taskmesh \
        "$root/cluster/start.sh" 3 "$work/cluster" >"$work/start.log"
    url=$(awk '/node 1/{for(i=1;i<=NF;i++) if($i ~ /^http/) print $i}' "$work/start.log" | head -1)
    [ -n "$url" ] || { cat "$work/start.log" >&2; exit 1; }
    tm_pids=()
    for i in 1 2 3; do tm_pids+=("$(cat "$work/cluster/node-$i.pid")"); done
    # Let the groups elect and settle on their preferred leaders before measuring.
    sleep 8
    extra=(--remote-only)
fi
size=$(answer_bytes "$url")
echo "tasks/get answer: $size bytes; loadgen ${args[*]}"
for threads in cores 1; do
    cport=$(free_port)
    topt=()
    [ "$threads" = cores ] || topt=(--threads "$threads")
    "$bin/ceiling" --listen "127.0.0.1:$cport" --body-bytes "$size" "${topt[@]}" >/dev/null &
    cpid=$!
    bench_pids+=($cpid)
    wait_port "$cport"
    echo "== ceiling (threads: $threads)"
    "$bin/loadgen" --url "http://127.0.0.1:$cport/mcp" --target "ceiling-$threads" "${args[@]}" \
        --json "$out/ceiling-$threads.json"
    kill "$cpid"
    wait "$cpid" 2>/dev/null || true
done
python3 - "$out" <<'PY'
import json, shutil, sys
out = sys.argv[1]
best = max(("cores", "1"), key=lambda t: json.load(open(f"{out}/ceiling-{t}.json"))["per_s"])
r = json.load(open(f"{out}/ceiling-{best}.json"))
r["target"] = "ceiling"
json.dump(r, open(f"{out}/ceiling.json", "w"))
print(f"ceiling: the run with threads = {best}")
PY
echo "== taskmesh ($mode)"
before=$(cpu_ticks | tr '\n' ' ')
"$bin/loadgen" --url "$url" --target "taskmesh-$mode" "${args[@]}" "${extra[@]}" --json "$out/taskmesh.json"
after=$(cpu_ticks | tr '\n' ' ')
python3 - "$out/taskmesh.json" "$(getconf CLK_TCK)" "$before" "$after" <<'PY'
import json, sys
ok = json.load(open(sys.argv[1]))["ok"]
tick = int(sys.argv[2])
before, after = (list(map(int, a.split())) for a in sys.argv[3:5])
per = [(a - b) / tick / max(ok, 1) * 1e6 for a, b in zip(after, before)]
print("CPU per answered request: " + ", ".join(f"node {i + 1} {us:.1f} µs" for i, us in enumerate(per)))
PY
reports=("$out/ceiling.json" "$out/taskmesh.json")
if [ "$mode" = single ] && [ "${SKIP_PEER:-}" != 1 ]; then
    echo "== FastMCP peer"
    PORT=$(free_port) LOADGEN=$bin/loadgen "$root/benches/fastmcp_peer.sh" "${args[@]}" --json "$out/fastmcp.json"
    reports+=("$out/fastmcp.json")
fi
python3 - "${reports[@]}" <<'PY'
import json, sys
r = [json.load(open(p)) for p in sys.argv[1:]]
ceiling, tm = r[0], r[1]
print()
print(f"{'target':<18}{'ok/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
for x in r:
    errs = sum(x["failures"].values())
    print(f"{x['target']:<18}{x['per_s']:>12.0f}{x['latency_ms']['p50']:>10.3f}{x['latency_ms']['p99']:>10.3f}{errs:>8}")
print(f"\ntaskmesh / ceiling = {tm['per_s'] / ceiling['per_s']:.1%}")
if len(r) > 2 and r[2]["per_s"] > 0:
    print(f"taskmesh / FastMCP = {tm['per_s'] / r[2]['per_s']:.1f}x")
PY
if [ "$mode" = single ] && [ "${NGINX:-1}" != 0 ] && command -v nginx >/dev/null && command -v wrk >/dev/null; then
    echo
    echo "== nginx ceiling (wrk)"
    "$root/benches/nginx_ceiling.sh" 1 32 10
fi
