#!/usr/bin/env bash
# The test command: checks that this machine has the system packages the tests need, installs
# the missing ones when run as root (Debian or Ubuntu, apt-get), and otherwise names each with
# its install command and stops; then runs every test of the workspace. Arguments are passed to
# `cargo test` (for example `--locked`, or a test name filter after `--`).
#
# What each package is for:
#   python3-venv  the Python SDK interop and upstream tests make a virtualenv under target/
#   nodejs, npm   the TypeScript SDK, conformance-suite, OAuth and upstream tests install their
#                 npm packages (and the Node 22 they need) under target/
#   iproute2      the partition test puts each node in a network namespace (`ip netns`)
#   prometheus    the metrics tests check /metrics with promtool and run a real Prometheus
#   util-linux    the deployment test runs the binary as PID 1 of a new PID namespace (unshare);
#                 the webhook DNS test runs it in a mount namespace with its own /etc/hosts
#   tmux          the command-line tests run `taskmesh call` under a real terminal (progress bar,
#                 prompts, Ctrl-C) in a tmux session of their own
#
# The partition, PID-namespace and webhook DNS tests also need root.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each check: a package name and a command that succeeds when what the tests use is there.
missing=()
need() {
    local package=$1
    shift
    if ! "$@" >/dev/null 2>&1; then
        missing+=("$package")
    fi
}
need python3-venv python3 -c 'import venv, ensurepip'
need nodejs command -v node
need npm command -v npm
need iproute2 command -v ip
need prometheus command -v promtool
need util-linux command -v unshare
need tmux command -v tmux

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
        echo "the tests need these system packages, which this machine does not have:" >&2
        for p in "${missing[@]}"; do
            echo "  $p: sudo apt-get install -y $p" >&2
        done
        exit 1
    fi
fi

exec cargo test --workspace "$@"
