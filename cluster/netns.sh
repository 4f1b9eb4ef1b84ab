#!/usr/bin/env bash
# Test hosts in network namespaces (root only), so that a test can cut one node off.
#
#   cluster/netns.sh up PREFIX N      create N node namespaces PREFIX-n1..N and a hub PREFIX-h
#   cluster/netns.sh cut PREFIX I     cut node I off the cluster network (peers), keep clients
#   cluster/netns.sh heal PREFIX I    reconnect node I
#   cluster/netns.sh down PREFIX N    delete everything `up` created
#
# Node I has two addresses: 10.231.0.I on the cluster network (gRPC between nodes) and
# 10.232.0.I on the client network (MCP). This namespace is given 10.232.0.254 on the client
# network through a veth into the hub, so the test can reach every node's MCP port. Both
# networks exist only inside namespaces this script creates; nothing else is routed.
set -euo pipefail
cmd=${1:?command}
p=${2:?prefix}
hub="$p-h"
case "$cmd" in
up)
    n=${3:?count}
    ip netns add "$hub"
    ip -n "$hub" link set lo up
    ip -n "$hub" link add brc type bridge
    ip -n "$hub" link add brm type bridge
    ip -n "$hub" link set brc up
    ip -n "$hub" link set brm up
    ip link add "$p-r" type veth peer name rm netns "$hub"
    ip -n "$hub" link set rm master brm up
    ip addr add 10.232.0.254/24 dev "$p-r"
    ip link set "$p-r" up
    for i in $(seq 1 "$n"); do
        ns="$p-n$i"
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip -n "$ns" link add c0 type veth peer name "c$i" netns "$hub"
        ip -n "$ns" link add m0 type veth peer name "m$i" netns "$hub"
        ip -n "$ns" addr add "10.231.0.$i/24" dev c0
        ip -n "$ns" addr add "10.232.0.$i/24" dev m0
        ip -n "$ns" link set c0 up
        ip -n "$ns" link set m0 up
        ip -n "$hub" link set "c$i" master brc up
        ip -n "$hub" link set "m$i" master brm up
    done
    ;;
cut)
    ip -n "$hub" link set "c${3:?node}" down
    ;;
heal)
    ip -n "$hub" link set "c${3:?node}" up
    ;;
down)
    n=${3:?count}
    for i in $(seq 1 "$n"); do ip netns del "$p-n$i" 2>/dev/null || true; done
    ip link del "$p-r" 2>/dev/null || true
    ip netns del "$hub" 2>/dev/null || true
    ;;
*)
    echo "unknown command $cmd" >&2
    exit 2
    ;;
esac
