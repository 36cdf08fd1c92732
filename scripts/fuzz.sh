#!/usr/bin/env bash
# Fuzzes the signature header parser and verify, the event parser, and the whole layer over
# MokaStore, each for SECONDS (default 600), one after the other. Installs cargo-fuzz if it
# is missing; needs the nightly toolchain (`rustup toolchain install nightly`).
#
#   scripts/fuzz.sh            # 10 minutes per target
#   scripts/fuzz.sh 60         # 1 minute per target
#   scripts/fuzz.sh 60 layer   # one target
#
# New inputs go to fuzz/corpus/TARGET (not committed); the committed seeds are read from
# fuzz/seeds/TARGET. A crash stops the run and leaves its input in fuzz/artifacts/TARGET.
# Each target's final statistics (executions, corpus) are printed at its end and kept in
# target/fuzz-logs/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(signature_header event_parse layer)

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
mkdir -p target/fuzz-logs
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target" "fuzz/seeds/$target"
    echo "== $target: ${seconds} s"
    log="target/fuzz-logs/$target.log"
    status=0
    cargo +nightly fuzz run "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E '^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
    echo "corpus: $(find "fuzz/corpus/$target" -type f | wc -l) inputs"
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$log" >&2
        echo "$target failed (exit $status): see $log and fuzz/artifacts/$target" >&2
        exit "$status"
    fi
done
