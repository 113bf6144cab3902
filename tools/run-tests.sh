#!/usr/bin/env bash
# The whole test suite, as the README and CI run it: set up, check the formatting (clang-format, the
# repository's .clang-format, every tracked C++/CUDA source), build (ci preset: warnings are errors),
# then every ctest label (unit, slow, gpu: gpu tests skip themselves without a GPU); then the
# ASan+UBSan build of the unit binaries (asan preset, warnings are errors) and their run, and a
# bounded libFuzzer run of every parser (tools/fuzz.sh). Measured from a clean clone on a 2-core
# machine with the packages installed (2026-12-05, before building only the unit binaries under
# ASan and fuzzing 10 s a target): ci build 9.3 min (the CUDA kernels included), ci tests 3.3 min,
# asan build 10.4 min, asan tests 3.1 min, fuzz 3.4 min: 29.5 min in all; a fresh machine adds
# the apt installs.
#
# RLPARITY_SKIP_ASAN=1 / RLPARITY_SKIP_FUZZ=1 skip those stages (local iteration only);
# RLPARITY_FUZZ_SECONDS sets the per-target fuzzing time (default 10; `tools/fuzz.sh 300` fuzzes deeper).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
stage() { echo "== $1 ($(date -u +%T))"; }
stage "format"
# shellcheck disable=SC2046
clang-format --dry-run --Werror $(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' 2>/dev/null ||
  find src include kernels tests tools -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh')
stage "ci build"
cmake --preset ci
cmake --build --preset ci
stage "ci tests"
ctest --preset ci
if [[ "${RLPARITY_SKIP_ASAN:-0}" != "1" ]]; then
  stage "asan build"
  cmake --preset asan
  cmake --build --preset asan
  stage "asan tests"
  ctest --preset asan
fi
if [[ "${RLPARITY_SKIP_FUZZ:-0}" != "1" ]]; then
  stage "fuzz"
  tools/fuzz.sh "${RLPARITY_FUZZ_SECONDS:-10}"
fi
stage "done"
