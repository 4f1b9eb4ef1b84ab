#!/usr/bin/env bash
# Polls of taskmesh against nginx answering the same bytes, with wrk: the same client, the
# same settings, the same request, in one run.
#
#   benches/nginx_ceiling.sh [ROUNDS] [CONNECTIONS] [SECONDS]     (defaults 3, 32, 10)
#
# Starts `taskmesh serve` (release build), opens a 2025-11-25 session, creates one long
# `slow_compute` task and records the exact answer of a `tasks/get` of it. Then, ROUNDS times
# in turn: nginx (`return 200` of that answer, one worker per core) and taskmesh, each polled
# by `wrk -t1 -cCONNECTIONS -dSECONDSs --latency` with that `tasks/get` request (POST /mcp
# with the session's headers). wrk checks nothing but the HTTP status, so the script checks
# that no answer was other than 2xx, and that taskmesh's answer is the one recorded.
# Prints each run's rate and p99, and taskmesh / nginx per round.
#
# Needs `nginx` and `wrk` on the PATH (Debian: `apt-get install nginx-light wrk`).
set -euo pipefail
rounds=${1:-3}
conns=${2:-32}
seconds=${3:-10}
for t in nginx wrk; do
    command -v "$t" >/dev/null || {
        echo "$0 needs $t (Debian: apt-get install nginx-light wrk)" >&2
        exit 2
    }
done
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh)
start_serve "$root/target/release/taskmesh"

# The session, the task, and the recorded answer.
open_session "$url"
task=$(long_task "$url")
request='{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"'"$task"'"}}'
curl -s -D "$work/head.txt" -o "$work/answer.json" "${h[@]}" "$url" -d "$request"
ctype=$(tr -d '\r' <"$work/head.txt" | awk 'tolower($1)=="content-type:"{print $2}')
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["result"]["status"]=="working", r' "$work/answer.json"
echo "tasks/get answer: $(wc -c <"$work/answer.json") bytes, $ctype"

# nginx: the same bytes for every request to /mcp.
nport=$(free_port)
mkdir -p "$work/nginx"
python3 - "$work/nginx/nginx.conf" "$nport" "$work/answer.json" "$ctype" "$work/nginx" <<'PY'
import sys
conf, port, answer, ctype, d = sys.argv[1:]
body = open(answer).read().replace("\\", "\\\\").replace("'", "\\'")
open(conf, "w").write(f"""
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
daemon off;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        location /mcp {{
            default_type {ctype};
            return 200 '{body}';
        }}
    }}
}}
""")
PY
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
bench_pids+=($!)
wait_port "$nport"
got=$(curl -s "${h[@]}" "http://127.0.0.1:$nport/mcp" -d "$request")
[ "$got" = "$(cat "$work/answer.json")" ] || {
    echo "nginx does not answer the recorded bytes" >&2
    exit 1
}

# The request, for wrk.
python3 - "$work/poll.lua" "$request" "$sid" <<'PY'
import json, sys
path, request, sid = sys.argv[1:]
open(path, "w").write(f"""
wrk.method = "POST"
wrk.body = {json.dumps(request)}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Mcp-Session-Id"] = "{sid}"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
""")
PY

# One wrk run against $1; prints "RATE P99_MS".
run() {
    local out
    out=$(wrk -t1 -c"$conns" -d"${seconds}s" --latency -s "$work/poll.lua" "$1")
    if grep -q "Non-2xx\|Socket errors" <<<"$out"; then
        echo "$out" >&2
        echo "errors against $1" >&2
        exit 1
    fi
    python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
v, unit = re.search(r"\s99%\s+([\d.]+)(us|ms|s)\b", out).groups()
ms = float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
print(f"{rate:.0f} {ms:.3f}")
PY
}

echo "wrk -t1 -c$conns -d${seconds}s, $rounds rounds"
for r in $(seq "$rounds"); do
    read -r n_rate n_p99 <<<"$(run "http://127.0.0.1:$nport/mcp")"
    read -r t_rate t_p99 <<<"$(run "$url")"
    echo "round $r  nginx $n_rate/s (p99 $n_p99 ms)  taskmesh $t_rate/s (p99 $t_p99 ms)  $(python3 -c "print(f'{100*$t_rate/$n_rate:.1f} %')")"
done
# The task is still the one polled: the answers were real.
curl -s "${h[@]}" "$url" -d "$request" | cmp -s - "$work/answer.json" || echo "note: the answer changed during the run" >&2
