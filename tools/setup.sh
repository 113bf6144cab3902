#!/usr/bin/env bash
# Installs everything rlparity needs from Debian's packages. Idempotent: when all is present it only
# checks (no apt-get update), so it is quick to run before every build.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev libhdf5-dev libcli11-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  python3 python3-h5py python3-numpy
  clang-format
)
# Optional extras used by parts of the test suite (browser-rendered reports, fuzzing).
if [[ "${RLPARITY_SETUP_EXTRAS:-1}" == "1" ]]; then
  packages+=(clang libclang-rt-14-dev)
  packages+=(chromium)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda (the CUDA backend will be built)"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda (CPU backend only)"
fi
