#!/usr/bin/env bash
# Start a local taskmesh cluster of N nodes (1 to 9) on loopback ports, data under one folder.
# Node 1 bootstraps the cluster; every shard gets three replicas (all nodes when N < 3).
#
#   cluster/start.sh [N] [DIR]        N defaults to 3, DIR to ./cluster-data
#
# Environment: NODE_BIN (default: build and use target/release/taskmesh),
# BASE_PORT (default 18000: node i serves MCP on BASE_PORT+i and gRPC on BASE_PORT+100+i),
# SHARDS (default 32), NODE_EXTRA_CONFIG (a TOML file appended to every node's configuration:
# `[[upstream]]` tables, say), INSECURE=1 (plain gRPC between the nodes instead of mutual TLS).
# Prints each node's MCP URL. Stop it with cluster/stop.sh DIR.
#
# The internal port runs mutual TLS: DIR/certs holds a throwaway authority, one certificate
# per node and the operator's (`taskmesh certs`, made once and reused), so that
#   taskmesh cluster status --peer 127.0.0.1:$((BASE_PORT+101)) --certs DIR/certs
# works against the cluster.
set -euo pipefail
n=${1:-3}
dir=${2:-./cluster-data}
base=${BASE_PORT:-18000}
shards=${SHARDS:-32}
if ! [[ "$n" =~ ^[1-9]$ ]]; then
    echo "N must be between 1 and 9" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NODE_BIN:-}
if [ -z "$bin" ]; then
    (cd "$root" && cargo build --release -q -p taskmesh)
    bin="$root/target/release/taskmesh"
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
secret_file="$dir/session.secret"
[ -f "$secret_file" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret_file"
if [ -z "${INSECURE:-}" ]; then
    ids=()
    for i in $(seq 1 "$n"); do
        [ -f "$dir/certs/node-$i.pem" ] || ids+=(--node "$i")
    done
    if [ ${#ids[@]} -gt 0 ] || [ ! -f "$dir/certs/admin.pem" ]; then
        "$bin" certs --out "$dir/certs" "${ids[@]}" --admin > /dev/null
    fi
fi
peers=""
for i in $(seq 1 "$n"); do
    peers+="{ id = $i, grpc = \"127.0.0.1:$((base + 100 + i))\" }, "
done
for i in $(seq 1 "$n"); do
    cat > "$dir/node-$i.toml" <<CONF
node_id = $i
listen = "127.0.0.1:$((base + i))"
data_dir = "$dir/node-$i"
shards = $shards
[session]
secret = "$(cat "$secret_file")"
[cluster]
grpc_listen = "127.0.0.1:$((base + 100 + i))"
peers = [ ${peers%, } ]
CONF
    if [ -z "${INSECURE:-}" ]; then
        cat >> "$dir/node-$i.toml" <<CONF
[cluster.tls]
ca_file = "$dir/certs/ca.pem"
cert_file = "$dir/certs/node-$i.pem"
key_file = "$dir/certs/node-$i.key"
CONF
    else
        echo "insecure = true" >> "$dir/node-$i.toml"
    fi
    if [ -n "${NODE_EXTRA_CONFIG:-}" ]; then
        cat "$NODE_EXTRA_CONFIG" >> "$dir/node-$i.toml"
    fi
done
for i in $(seq 1 "$n"); do
    if [ -f "$dir/node-$i.pid" ] && kill -0 "$(cat "$dir/node-$i.pid")" 2>/dev/null; then
        echo "node $i is already running (pid $(cat "$dir/node-$i.pid"))" >&2
        exit 1
    fi
    extra=()
    [ "$i" = 1 ] && extra=(--bootstrap)
    NO_COLOR=1 nohup "$bin" node --config "$dir/node-$i.toml" "${extra[@]}" \
        > "$dir/node-$i.log" 2>&1 &
    echo $! > "$dir/node-$i.pid"
done
for i in $(seq 1 "$n"); do
    for _ in $(seq 1 300); do
        grep -q "listening on" "$dir/node-$i.log" && break
        if ! kill -0 "$(cat "$dir/node-$i.pid")" 2>/dev/null; then
            echo "node $i exited; see $dir/node-$i.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    url=$(grep -o "listening on http://[^ ]*" "$dir/node-$i.log" | head -n 1 | cut -d' ' -f3)
    echo "node $i: $url"
done
