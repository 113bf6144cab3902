#!/usr/bin/env bash
# Prepares, on a machine without a GPU, everything tools/gpu-check.sh needs on a GPU machine that
# has the NVIDIA driver and CUDA libraries but none of our Debian dependencies (a bare device
# image): prebuilt binaries, the shared libraries they need, and the CPU emulator's reference runs.
#
#   tools/gpu-bundle.sh [DIR]        (default DIR: .gpu-bundle, ignored by git)
#   RLPARITY_GPU_CHECK_PREBUILT=DIR/bin RLPARITY_GPU_CHECK_REFERENCE=DIR/ref tools/gpu-check.sh
#
# DIR/bin: rlparity, the gpu test binaries and rlparity_make_checkpoint, built here for sm_90
#          (CMAKE_CUDA_ARCHITECTURES=90, release) and for x86-64-v3 rather than this CPU
#          (-march=native would not be portable; results are bit-identical either way), stripped;
#          DIR/bin/lib: their shared libraries except glibc's and the NVIDIA driver/cuBLASLt,
#          which the GPU machine must provide.
# DIR/ref: the CPU replays that gpu-check.sh compares the GPU against, over the same tokens:
#          stories260K (bundled; responses sampled once here) and the issue-4 benchmark shape
#          (tools/gpu-check.sh generates that checkpoint there from the same seed and checks its
#          sha256 against DIR/ref/bench-ckpt.sha256).
# RLPARITY_GPU_BUNDLE_KEEP_REF=1 rebuilds DIR/bin only and keeps DIR/ref: for a change that keeps
# the emulator's bits (check with tools/same-bits.sh first), the CPU references are still valid.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DIR=${1:-$ROOT/.gpu-bundle}
BUILD=$ROOT/build/gpu-prebuilt
mkdir -p "$DIR/bin/lib" "$DIR/ref"
DIR=$(cd "$DIR" && pwd)

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRLPARITY_ENABLE_BENCH=OFF -DRLPARITY_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target rlparity gpu_cross_backend_ops_test gpu_cuda_casts_test rlparity_make_checkpoint
for b in rlparity tests/gpu_cross_backend_ops_test tests/gpu_cuda_casts_test tools/rlparity_make_checkpoint; do
  install -m 755 -s "$BUILD/$b" "$DIR/bin/"
done
# Shared libraries: everything ldd resolves except the C library family, the driver and cuBLASLt.
for b in "$DIR"/bin/*; do [[ -f $b ]] && ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*|libcuda|libcublasLt|libcublas)\.so' |
  while read -r lib; do cp -L "$lib" "$DIR/bin/lib/"; done
# The C++ runtime only as a fallback: a newer one on the GPU machine serves our binaries and its
# own cuBLASLt alike (gpu-check.sh uses ours only when the machine's cannot run rlparity).
mkdir -p "$DIR/bin/lib/fallback"
mv -f "$DIR"/bin/lib/libstdc++.so.6 "$DIR"/bin/lib/libgcc_s.so.1 "$DIR/bin/lib/fallback/"
du -sh "$DIR/bin"
if [[ "${RLPARITY_GPU_BUNDLE_KEEP_REF:-0}" == "1" && -s "$DIR/ref/bench-cpu.h5" ]]; then
  echo "gpu-bundle: kept the CPU references in $DIR/ref"
  exit 0
fi

RLP=$DIR/bin/rlparity
# A python3 with h5py (Debian's python3-h5py is for /usr/bin/python3, which a pyenv may shadow).
PY=python3
$PY -c 'import h5py' 2>/dev/null || PY=/usr/bin/python3
# stories260K: the default replay (responses sampled once by the bf16 generation path), all
# recipes the device check compares.
"$RLP" replay --backend cpu --recipes bf16,fp8-gen,fp8-e2e,fp8-e2e-kv -q --force -o "$DIR/ref/stories-cpu.h5"
$PY "$ROOT/tools/gpu-inputs.py" extract "$DIR/ref/stories-cpu.h5" "$DIR/ref/stories-inputs.jsonl"
# The issue-4 benchmark: hidden 1024, intermediate 2816, 8 layers, 16/8 heads, vocab 32000, bf16;
# 16 sequences of 64 prompt + 192 response tokens (random ids, responses given).
CKPT=$BUILD/bench-ckpt
rm -rf "$CKPT"
"$DIR/bin/rlparity_make_checkpoint" --arch llama --hidden 1024 --intermediate 2816 --layers 8 --heads 16 --kv-heads 8 \
  --vocab 32000 --max-pos 2048 --dtype bf16 --seed 7 --out "$CKPT" >/dev/null
(cd "$CKPT" && sha256sum config.json model.safetensors) >"$DIR/ref/bench-ckpt.sha256"
$PY "$ROOT/tools/gpu-inputs.py" bench "$DIR/ref/bench-inputs.jsonl"
"$RLP" replay --backend cpu --checkpoint "$CKPT" --inputs "$DIR/ref/bench-inputs.jsonl" --recipes bf16,fp8-gen,fp8-e2e \
  --no-oracle -q --force -o "$DIR/ref/bench-cpu.h5"
du -sh "$DIR"
