#!/usr/bin/env bash
# The whole test suite, as the README and CI run it: set up, check the formatting (clang-format, the
# repository's .clang-format, every tracked C++/CUDA source), build (ci preset: warnings are errors),
# then every ctest label (unit, slow, gpu: gpu tests skip themselves without a GPU); then the
# ASan+UBSan build of the suite (asan preset, warnings are errors; labels slow, gpu and browser
# excluded there) and a bounded libFuzzer run of every parser (tools/fuzz.sh). Measured from a
# clean clone on a 2-core machine with the packages already installed (2026-12-04): ci build 6.8
# min (the CUDA kernels included), ci tests 3.5 min (the exhaustive libm-model test ~1 min), asan
# build 6.3 min, asan tests 1.7 min, fuzz 3.0 min: 21.3 min in all; a fresh machine adds the apt
# installs.
#
# RLPARITY_SKIP_ASAN=1 / RLPARITY_SKIP_FUZZ=1 skip those stages (local iteration only);
# RLPARITY_FUZZ_SECONDS sets the per-target fuzzing time (default 20).
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
  tools/fuzz.sh "${RLPARITY_FUZZ_SECONDS:-20}"
fi
stage "done"
