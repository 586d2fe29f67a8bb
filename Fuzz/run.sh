#!/usr/bin/env bash
# Builds the libFuzzer targets (Swift with -sanitize=fuzzer,address) and runs each for SECONDS.
#
#   Fuzz/run.sh 60              every target, 60 s each (what CI runs)
#   Fuzz/run.sh 600 FuzzJSON    one target, longer
#   FUZZ_SEED=1 Fuzz/run.sh 45  a fixed seed: the same inputs in the same order on every machine
#                               (what CI runs, so its verdict is reproducible; 0, the default, is random)
#
# Each target starts from its committed seed corpus (Fuzz/corpus/<name>, copied to a scratch
# directory so new inputs stay out of the repository). A crash, sanitizer report or disagreement
# stops it, leaves the reproducer in Fuzz/artifacts/ and makes this script exit non-zero.
# Replay a reproducer with the plain build: .build/debug/FuzzJSON Fuzz/artifacts/crash-...
# and make it a regression test (Tests/*, or the corpus) once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("${@:-FuzzJSON FuzzPredicate FuzzDispatch}")
TARGETS=(${TARGETS[@]})
SWIFT="${SWIFT:-swift}"
SCRATCH=.build/fuzz
FLAGS=(--scratch-path "$SCRATCH" -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING)

for target in "${TARGETS[@]}"; do
    echo "== building $target (sanitizers: fuzzer, address)"
    # ld.gold warns about every ASan helper symbol; keep the log readable.
    "$SWIFT" build "${FLAGS[@]}" --product "$target" 2>&1 | grep -v "Cannot export local symbol" || true
done
BIN="$("$SWIFT" build "${FLAGS[@]}" --show-bin-path)"

mkdir -p Fuzz/artifacts
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
status=0
for target in "${TARGETS[@]}"; do
    name="$(echo "${target#Fuzz}" | tr '[:upper:]' '[:lower:]')"
    mkdir -p "$WORK/$name"
    cp Fuzz/corpus/"$name"/* "$WORK/$name"/ 2>/dev/null || true
    echo "== $target for ${SECONDS_EACH}s from $(ls "$WORK/$name" | wc -l) seeds"
    # detect_leaks=0: the targets keep one store or server for the whole run on purpose.
    # SWIFT_BACKTRACE off: the Swift backtracer trips ASan after a fatalError and hides the message.
    # A target's dictionary (tokens libFuzzer splices into inputs), when it has one.
    dict=()
    if [ -f "Fuzz/$name.dict" ]; then dict=(-dict="Fuzz/$name.dict"); fi
    if ! SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "$BIN/$target" "${dict[@]}" \
        -seed="${FUZZ_SEED:-0}" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=4096 -max_len=8192 \
        -print_final_stats=1 -artifact_prefix="Fuzz/artifacts/$target-" "$WORK/$name" \
        >"$WORK/$target.log" 2>&1; then
        status=1
        echo "!! $target found a problem:"
        tail -60 "$WORK/$target.log"
    else
        grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$WORK/$target.log" || tail -3 "$WORK/$target.log"
    fi
done
exit $status
