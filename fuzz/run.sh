#!/bin/sh
# `make fuzz`: every fuzz target, this crate's (fuzz/) and ipvs-sys's
# (ipvs-sys/fuzz/), for FUZZ_SECONDS each (FUZZ_TARGETS to pick some),
# with cargo-fuzz on the nightly toolchain. What the fuzzer finds new is
# kept under target/fuzz/ between runs, so that runs go on from where the
# last stopped; the committed corpora (fuzz/corpus/, small, replayed by
# `cargo test`) are only read. A crash or a hang fails the run and names
# the input that causes it (under the crate's fuzz/artifacts/). Each target's
# last line is `RESULT fuzz TARGET execs N cov N features N corpus N
# half_cov N half_features N` (the last two at half the executions: a
# plateau is a second half that added almost nothing).
#
# FUZZ_SANITIZER is cargo-fuzz's sanitizer: `address` (the default) or
# `none`. The targets are safe Rust, so ASan watches only the unsafe code
# of their dependencies; without it (and its allocator) they run several
# times faster, which is what long runs towards a plateau want. Each
# sanitizer builds in its own directory, so switching rebuilds nothing.
set -eu

seconds=${FUZZ_SECONDS:-60}
sanitizer=${FUZZ_SANITIZER:-address}
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/target/fuzz
status=0

command -v cargo-fuzz >/dev/null || {
    echo "fuzz: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 1
}

# Each from the directory that holds its fuzz/, as `cargo fuzz` expects
# (run from elsewhere it builds everything again).
for crate in . ipvs-sys; do
    cd "$root/$crate"
    build=fuzz/target/sanitizer-$sanitizer
    cargo +nightly fuzz build -O --debug-assertions -s "$sanitizer" \
        --target-dir "$build"
    for target in $(cargo +nightly fuzz list); do
        if [ -n "${FUZZ_TARGETS:-}" ]; then
            case " $FUZZ_TARGETS " in
                *" $target "*) ;;
                *) continue ;;
            esac
        fi
        found=$work/$target
        log=$work/$target.log
        mkdir -p "$found"
        echo "fuzz: $target for ${seconds}s, sanitizer $sanitizer (log $log)"
        # The binary the build made (`cargo fuzz run` would build the
        # target again on its own).
        mkdir -p "fuzz/artifacts/$target"
        if ! "$build/$triple/release/$target" \
            "$found" "fuzz/corpus/$target" \
            -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
            -artifact_prefix="fuzz/artifacts/$target/" \
            >"$log" 2>&1; then
            status=1
            echo "fuzz: $target FAILED:" >&2
            grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written' \
                "$log" >&2 || tail -20 "$log" >&2
        fi
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        last=$(grep -E '^#[0-9]+' "$log" | tail -1)
        # Where the run stood at half its executions: a plateau is a
        # second half that added (almost) nothing.
        half=$(awk -v half="$(( ${execs:-0} / 2 ))" \
            '/^#[0-9]+/ { n = substr($1, 2) + 0; if (n <= half) line = $0 } END { print line }' "$log")
        field() { echo "$1" | sed -n "s/.* $2: *\([0-9]*\).*/\1/p"; }
        echo "RESULT fuzz $target execs ${execs:-0} cov $(field "$last" cov) features $(field "$last" ft) corpus $(field "$last" corp) half_cov $(field "$half" cov) half_features $(field "$half" ft)"
    done
done
exit $status
