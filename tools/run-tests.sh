#!/usr/bin/env bash
# The whole test suite, as the README and CI run it: set up, build (ci preset: warnings are errors),
# then every ctest label (unit, slow, gpu: gpu tests skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci
