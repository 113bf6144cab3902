#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan in build/fuzz, replays the
# saved regression inputs (fixtures/fuzz/regressions/), then fuzzes each target for SECONDS
# (default 60) from its seed corpus fixtures/fuzz/<target>/. Fails if any target crashes, hangs
# (-timeout), runs out of memory (-rss_limit_mb) or leaks in our code. See docs/robustness.md.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]      e.g. tools/fuzz.sh 300 fuzz_safetensors
#
# Environment: FUZZ_JOBS (targets fuzzed at once, default 2), FUZZ_BUILD_DIR (default build/fuzz).
# New corpus entries go to $FUZZ_BUILD_DIR/corpus/<target>/, crash inputs to
# $FUZZ_BUILD_DIR/artifacts/<target>/, logs to $FUZZ_BUILD_DIR/logs/, and a table of executions per
# target to $FUZZ_BUILD_DIR/summary.txt.
#
# fuzz_run_file drives the (uninstrumented) HDF5 C library. It runs in libFuzzer's fork mode with
# -ignore_crashes=1; each crash input is replayed afterwards and classified by its stack: a fault
# whose innermost frame outside the sanitizer runtime and libc lies in libhdf5 is reported as an
# HDF5-internal finding (kept under $FUZZ_BUILD_DIR/hdf5-internal/, does not fail the run); one in
# our code fails it like any other target.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
secs=${1:-60}
shift || true
build=${FUZZ_BUILD_DIR:-build/fuzz}
jobs=${FUZZ_JOBS:-2}

mkdir -p "$(dirname "$build")"
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (tools/setup.sh installs it)" >&2; exit 1; }
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DRLPARITY_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DRLPARITY_ENABLE_TESTS=OFF -DRLPARITY_ENABLE_BENCH=OFF -DRLPARITY_ENABLE_CUDA=OFF \
  -DRLPARITY_NATIVE=OFF -DRLPARITY_WERROR=ON >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }
cmake --build "$build" --target rlparity_fuzzers -j "${FUZZ_BUILD_JOBS:-2}"

if (($# > 0)); then targets=("$@"); else
  targets=()
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
mkdir -p "$build/logs" "$build/hdf5-internal"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
# Leaks inside libhdf5 (it caches on error paths) are not ours; the file names only HDF5 frames.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/fuzz/lsan-hdf5.supp}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# Innermost frame of the first stack in a report (crash, leak allocation, or the stack libFuzzer
# prints on a timeout) that is HDF5's or ours: prints "hdf5", "ours" or "unknown". Frames of the
# sanitizer runtime, libFuzzer, libc and libstdc++ are skipped; ours are frames with a source
# location in src/, include/ or tests/fuzz/.
classify() {
  awk '/^ *#[0-9]+ 0x/ {
         if ($0 ~ /libhdf5/) { print "hdf5"; found=1; exit }
         if ($0 ~ /\/(src|include|tests\/fuzz)\/[^ ]*\.(cpp|hpp):[0-9]/) { print "ours"; found=1; exit }
       }
       END { if (!found) print "unknown" }' "$1"
}

# 1. Regression inputs: every saved crash input must now be handled cleanly.
status=0
for t in "${targets[@]}"; do
  shopt -s nullglob
  regs=(fixtures/fuzz/regressions/"$t"-*)
  shopt -u nullglob
  ((${#regs[@]} == 0)) && continue
  if ! "$build/tests/fuzz/$t" -runs=1 "${regs[@]}" >"$build/logs/$t.regressions.log" 2>&1; then
    echo "fuzz: $t: a saved regression input fails again (see $build/logs/$t.regressions.log)" >&2
    status=1
  fi
done

# 2. Fuzzing.
run_target() {
  local t=$1 bin="$build/tests/fuzz/$1" log="$build/logs/$1.log"
  local corpus="$build/corpus/$t" art="$build/artifacts/$t/"
  mkdir -p "$corpus" "$art"
  local seeds=()
  [[ -d fixtures/fuzz/$t ]] && seeds=("fixtures/fuzz/$t")
  local opts=(-max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
              -artifact_prefix="$art" -close_fd_mask=1)
  if [[ $t == fuzz_run_file ]]; then
    opts+=(-max_len=65536 -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  fi
  local rc=0
  "$bin" "${opts[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$build/logs/$t.rc"
}
for t in "${targets[@]}"; do
  [[ -x $build/tests/fuzz/$t ]] || { echo "fuzz: no target $t" >&2; exit 1; }
  rm -rf "$build/artifacts/$t"
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  echo "fuzz: $t for ${secs}s"
  run_target "$t" &
done
wait

crash_logs=()  # replays of fuzz_run_file crash inputs that fault in our code
printf '%-22s %12s %8s  %s\n' target executions seconds result >"$build/summary.txt"
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  rc=$(cat "$build/logs/$t.rc")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  if [[ -z $execs ]]; then  # fork mode reports "#N: cov: ..." lines instead
    execs=$(grep -o '^#[0-9]*:' "$log" | tr -d '#:' | sort -n | tail -1 || true)
  fi
  result=ok
  shopt -s nullglob
  arts=("$build/artifacts/$t/"*)
  shopt -u nullglob
  if [[ $t == fuzz_run_file ]]; then
    for a in "${arts[@]}"; do
      [[ $a == *.log ]] && continue
      "$build/tests/fuzz/$t" -runs=1 -timeout=10 -rss_limit_mb=2048 "$a" >"$a.log" 2>&1 && continue
      case $(classify "$a.log") in
        hdf5) cp "$a" "$a.log" "$build/hdf5-internal/"
              [[ $result == ok ]] && result="ok (HDF5-internal finding kept)" ;;
        *) result="CRASH ($a; log $a.log)"; status=1; crash_logs+=("$a.log") ;;
      esac
    done
    [[ $rc -ne 0 && $result == ok ]] && { result="FAILED (rc $rc)"; status=1; }
  elif [[ $rc -ne 0 ]]; then
    result="CRASH (rc $rc: ${arts[*]:-no artifact}; log $log)"
    status=1
  fi
  printf '%-22s %12s %8s  %s\n' "$t" "${execs:-?}" "$secs" "$result" >>"$build/summary.txt"
done
cat "$build/summary.txt"
if ((status != 0)); then
  echo "fuzz: FAILED; crash logs in $build/logs/, inputs in $build/artifacts/" >&2
  for t in "${targets[@]}"; do
    [[ $(cat "$build/logs/$t.rc") == 0 || $t == fuzz_run_file ]] || grep -m1 -A12 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|uncaught exception' "$build/logs/$t.log" >&2 || true
  done
  for l in "${crash_logs[@]}"; do
    grep -m1 -A24 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|uncaught exception' "$l" >&2 || true
  done
fi
exit $status
