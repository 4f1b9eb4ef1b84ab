#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (seconds, default 60) and prints, per target, the
# executions, the corpus size and whether it found a crash. Not part of .ci/run.
#
#   fuzz/run.sh [SECONDS] [TARGET ...]
#
# Needs cargo-fuzz (installed here with `cargo install cargo-fuzz --locked` when missing). The
# targets are built without a sanitizer (`-s none`), which works on a stable toolchain; Rust's
# own checks (bounds, overflow in debug assertions, panics) are what a crash is. A crash leaves
# its input under fuzz/artifacts/TARGET/ and makes the script exit 1: turn it into a
# regression test beside the code it broke.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(jsonrpc signed_tokens config rpc_decode)
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
cargo fuzz build -s none
failed=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    log=$(mktemp)
    if cargo fuzz run -s none "$t" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        verdict="no crash"
    else
        verdict="CRASH (see artifacts/$t and the log below)"
        failed=1
        tail -40 "$log"
    fi
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
    corpus=$(find "corpus/$t" -type f | wc -l)
    printf '%-14s %ss  executions %s  corpus %s files  %s\n' "$t" "$seconds" "$runs" "$corpus" "$verdict"
    rm -f "$log"
done
exit $failed
