#!/usr/bin/env bash
# The prepared device check of the CUDA backend (issue 19), in one command on a machine with an
# NVIDIA GPU:
#
#   tools/gpu-check.sh
#       Debian machine with the CUDA toolkit: installs the dependencies (tools/setup.sh), builds
#       the release preset with CMAKE_CUDA_ARCHITECTURES=90 in build/gpu-check, and makes the CPU
#       reference runs itself.
#   RLPARITY_GPU_CHECK_PREBUILT=.gpu-bundle/bin RLPARITY_GPU_CHECK_REFERENCE=.gpu-bundle/ref tools/gpu-check.sh
#       a bare GPU image (driver + CUDA libraries, python3 with h5py, nothing else): binaries,
#       their shared libraries and the CPU reference runs prepared elsewhere by tools/gpu-bundle.sh.
#
# It prints
#   (a) per op: bitwise match rate, max ulp difference and NMSE between the CPU emulator and the
#       GPU (the cross-backend suite, tests/gpu/cross_backend_ops_test.cpp, the `gpu` ctest label);
#   (b) per recipe and path: the fraction of response tokens whose logprob is bit-identical
#       between `replay --backend cpu` and `--backend cuda` over identical tokens, and the largest
#       difference otherwise (tools/compare-backends.py), on stories260K and on the issue-4
#       benchmark (hidden 1024, 8 layers, vocab 32000; 16 sequences x (64 + 192) tokens);
#   (c) GPU replay throughput on the issue-4 benchmark: tokens/s, and the effective GEMM FLOP rate
#       (model GEMM FLOPs of every path run / time) against the H200's dense bf16 peak, both over
#       the wall time and over the device time inside cublasLtMatmul (RLPARITY_CUDA_GEMM_TIMING=1).
# Every stage has its own time limit; the whole is meant to finish within 8 minutes on one
# H100/H200 including the build. Exit status: 0 when every stage passed, 1 otherwise (the stages
# after a failed one still run where they can). When $OUT is set, logs, tables and run files are
# copied there.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${RLPARITY_GPU_CHECK_BUILD:-$ROOT/build/gpu-check}
PREBUILT=${RLPARITY_GPU_CHECK_PREBUILT:-}
REF=${RLPARITY_GPU_CHECK_REFERENCE:-}
[[ -z "$REF" ]] || REF=$(cd "$REF" && pwd) || exit 1
[[ -z "$PREBUILT" ]] || PREBUILT=$(cd "$PREBUILT" && pwd) || exit 1
WORK=$BUILD/gpu-check-work
JOBS=$(nproc)
T0=$(date +%s)
FAILED=()
# Dense bf16 tensor-core peak of the H200 SXM (NVIDIA's datasheet: 989.4 TFLOP/s without sparsity).
PEAK_BF16_TFLOPS=${RLPARITY_PEAK_BF16_TFLOPS:-989.4}

stage() { echo; echo "=== [$(($(date +%s) - T0))s] $*"; }
# run_stage NAME LIMIT_SECONDS CMD...: runs under a time limit, records a failure.
run_stage() {
  local name=$1 limit=$2
  shift 2
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "!!! stage '$name' timed out after ${limit}s"
    FAILED+=("$name (timeout)")
  elif ((rc != 0)); then
    echo "!!! stage '$name' failed (exit $rc)"
    FAILED+=("$name (exit $rc)")
  fi
  return $rc
}
finish() {
  stage "done in $(($(date +%s) - T0))s"
  # One archive (the device tool brings back only a few files): logs, tables, the GPU run files.
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    (cd "$WORK" && tar czf "$OUT/gpu-check-work.tgz" --ignore-failed-read $(ls *.log *.txt *.json *-cuda*.h5 dump/* 2>/dev/null)) || true
  fi
  if ((${#FAILED[@]})); then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
  fi
  echo "all stages passed"
  exit 0
}
mkdir -p "$WORK"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
fi

if [[ -n "$PREBUILT" ]]; then
  stage "prebuilt binaries from $PREBUILT"
  # Our shared libraries, then the machine's CUDA libraries (cuBLASLt) wherever this image keeps them.
  LIBS=$(cd "$PREBUILT" && pwd)/lib
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, d, "lib") for d in sorted(os.listdir(p))))' 2>/dev/null); do
    [[ -e $d/libcublasLt.so.13 || -e $d/libcublasLt.so.12 ]] && LIBS=$LIBS:$d
  done
  # rlparity loads cuBLASLt when the CUDA backend starts (kernels/cublaslt_api.hpp), so ldd below
  # cannot see it missing.
  if [[ $LIBS != *:* ]] && ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt\.so\.1[23] '; then
    FAILED+=("prebuilt: no libcublasLt.so.13/.12 in the CUDA folders or the loader's cache")
    finish
  fi
  # The machine's C++ runtime unless it is too old for our binaries.
  if ! LD_LIBRARY_PATH=$LIBS "$PREBUILT/rlparity" --version >/dev/null 2>&1; then
    LIBS=$LIBS/fallback:$LIBS
    echo "using the bundled C++ runtime ($(LD_LIBRARY_PATH=${LIBS#*:} "$PREBUILT/rlparity" --version 2>&1 | head -1))"
  fi
  echo "LD_LIBRARY_PATH for our binaries: $LIBS"
  BIN=$(cd "$PREBUILT" && pwd)
  # Only our binaries see our libraries (python3 keeps the image's own).
  for b in rlparity gpu_cross_backend_ops_test gpu_cuda_casts_test rlparity_make_checkpoint; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' "$LIBS" "$BIN/$b" >"$WORK/$b"
    chmod +x "$WORK/$b"
  done
  if LD_LIBRARY_PATH=$LIBS ldd "$BIN/rlparity" | grep -q 'not found'; then
    LD_LIBRARY_PATH=$LIBS ldd "$BIN/rlparity" | grep 'not found'
    FAILED+=("prebuilt: missing shared libraries")
    finish
  fi
  TESTS=$WORK
  RLP=$WORK/rlparity
  MKCKPT=$WORK/rlparity_make_checkpoint
else
  stage "setup (Debian packages)"
  RLPARITY_SETUP_EXTRAS=0 run_stage setup 300 tools/setup.sh || finish
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
  if ! command -v nvcc >/dev/null; then
    echo "!!! no nvcc found (PATH or /usr/local/cuda/bin): the CUDA backend cannot be built here"
    FAILED+=("toolkit")
    finish
  fi
  nvcc --version | tail -1
  stage "configure + build (release, CMAKE_CUDA_ARCHITECTURES=90, -j$JOBS)"
  run_stage configure 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DRLPARITY_ENABLE_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >"$WORK/configure.log" 2>&1 ||
    { tail -30 "$WORK/configure.log"; finish; }
  grep -q "CUDA backend ON" "$WORK/configure.log" || { echo "!!! CMake did not enable the CUDA backend"; tail -30 "$WORK/configure.log"; FAILED+=("cuda-config"); finish; }
  run_stage build 330 cmake --build "$BUILD" -j"$JOBS" --target rlparity gpu_cross_backend_ops_test gpu_cuda_casts_test \
    rlparity_make_checkpoint >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; finish; }
  TESTS=$BUILD/tests
  RLP=$BUILD/rlparity
  MKCKPT=$BUILD/tools/rlparity_make_checkpoint
fi

stage "(a) cross-backend op suite: CPU emulator vs GPU (the gpu test label)"
run_stage cast-tests 60 "$TESTS/gpu_cuda_casts_test" >"$WORK/cuda_casts_test.log" 2>&1
tail -3 "$WORK/cuda_casts_test.log"
mkdir -p "$WORK/dump"
RLPARITY_GPU_DUMP_DIR="$WORK/dump" run_stage op-suite 240 "$TESTS/gpu_cross_backend_ops_test" \
  >"$WORK/cross_backend_ops_test.log" 2>&1
grep -E '^\[op-table\]' "$WORK/cross_backend_ops_test.log" | sed 's/^\[op-table\] //' | tee "$WORK/op-table.txt"
grep -E 'SKIPPED|FAILED|Failure|Expected|NMSE|differ|rror' "$WORK/cross_backend_ops_test.log" | head -60
tail -3 "$WORK/cross_backend_ops_test.log"

# Inputs with responses, taken from a run file, so both backends replay identical tokens.
extract_inputs() { python3 "$ROOT/tools/gpu-inputs.py" extract "$1" "$2"; }  # RUN.h5 OUT.jsonl
# Per recipe, the summary statistics of two run files side by side.
side_by_side() {  # LABEL CPU.h5 CUDA.h5
  "$RLP" summary --json "$2" >"$WORK/$1-cpu.json" && "$RLP" summary --json "$3" >"$WORK/$1-cuda.json" || return 1
  python3 - "$WORK/$1-cpu.json" "$WORK/$1-cuda.json" <<'PY' | tee "$WORK/$1-summary.txt"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra = {r["name"]: r["summary"] for r in a["recipes"]}
rb = {r["name"]: r["summary"] for r in b["recipes"]}
info = b.get("extra", {}).get("backend_info", {})
if info:
    print("cuda run: " + ", ".join(f"{k}={v}" for k, v in info.items()))
preferred = ["num_tokens", "mean_abs_log_ratio", "p50_abs_log_ratio", "p99_abs_log_ratio", "max_abs_log_ratio",
             "mean_kl_gen_train", "p99_kl_gen_train", "ratio_mean", "ratio_min", "ratio_max", "ess",
             "token_mult_prob_error", "gen_kl_error", "mismatch_kl", "tis_clip_frac", "rollout_probs_diff_mean",
             "top1_agree_frac", "mean_abs_gen_err_oracle", "mean_abs_train_err_oracle"]
for name in ra:
    if name not in rb:
        continue
    keys = [k for k in preferred if k in ra[name] and k in rb[name]] or sorted(set(ra[name]) & set(rb[name]))
    print(f"\nrecipe {name}")
    print(f"  {'statistic':<28} {'cpu':>14} {'cuda':>14} {'cuda/cpu':>9}")
    for k in keys:
        x, y = ra[name][k], rb[name][k]
        fx = "nan" if x is None else f"{x:.6g}"
        fy = "nan" if y is None else f"{y:.6g}"
        q = f"{y / x:.3f}" if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x != 0 else "-"
        print(f"  {k:<28} {fx:>14} {fy:>14} {q:>9}")
PY
}

# reference RUN: the CPU run over the same tokens, from $REF or made here.
reference() {  # NAME -> path of NAME-cpu.h5 (made here when $REF lacks it)
  if [[ -n "$REF" && -f "$REF/$1-cpu.h5" ]]; then echo "$REF/$1-cpu.h5"; else echo "$WORK/$1-cpu.h5"; fi
}
compare() {  # LABEL CPU.h5 CUDA.h5
  python3 "$ROOT/tools/compare-backends.py" "$2" "$3" --json "$WORK/$1-bitwise.json" | tee "$WORK/$1-bitwise.txt" ||
    FAILED+=("$1 compare")
  side_by_side "$1" "$2" "$3" >/dev/null || FAILED+=("$1 summary")
}

stage "(b) replay stories260K (bundled) on both backends, identical tokens"
RECIPES_S=bf16,fp8-gen,fp8-e2e,fp8-e2e-kv
S_CPU=$(reference stories)
if [[ -n "$REF" && -f "$REF/stories-inputs.jsonl" ]]; then
  cp "$REF/stories-inputs.jsonl" "$WORK/stories-inputs.jsonl"
elif run_stage stories-cpu 120 "$RLP" replay --backend cpu --recipes $RECIPES_S -q --force -o "$S_CPU" \
     >"$WORK/stories-cpu.log" 2>&1; then
  extract_inputs "$S_CPU" "$WORK/stories-inputs.jsonl"
fi
for mode in cublaslt exact; do
  if [[ -f "$WORK/stories-inputs.jsonl" ]] &&
     run_stage stories-cuda-$mode 120 "$RLP" replay --backend cuda --cuda-gemm $mode --recipes $RECIPES_S \
       --inputs "$WORK/stories-inputs.jsonl" -q --force -o "$WORK/stories-cuda-$mode.h5" >"$WORK/stories-cuda-$mode.log" 2>&1; then
    echo "--- --cuda-gemm $mode"
    cat "$WORK/stories-cuda-$mode.log"
    compare stories-$mode "$S_CPU" "$WORK/stories-cuda-$mode.h5"
  else
    tail -5 "$WORK"/stories-*.log 2>/dev/null
  fi
done

stage "(b) replay the issue-4 benchmark checkpoint (hidden 1024, 8 layers, vocab 32000) on both backends"
CKPT=$WORK/bench-ckpt
RECIPES_B=bf16,fp8-gen,fp8-e2e
run_stage make-checkpoint 120 "$MKCKPT" --arch llama --hidden 1024 --intermediate 2816 --layers 8 --heads 16 \
  --kv-heads 8 --vocab 32000 --max-pos 2048 --dtype bf16 --seed 7 --out "$CKPT" >"$WORK/make-checkpoint.log" 2>&1 ||
  { cat "$WORK/make-checkpoint.log"; rm -rf "$CKPT"; }
if [[ -n "$REF" && -f "$REF/bench-ckpt.sha256" && -d "$CKPT" ]]; then
  (cd "$CKPT" && sha256sum -c --quiet "$REF/bench-ckpt.sha256") || { echo "!!! generated checkpoint differs from the reference's"; FAILED+=("bench checkpoint"); }
fi
if [[ -n "$REF" && -f "$REF/bench-inputs.jsonl" ]]; then
  cp "$REF/bench-inputs.jsonl" "$WORK/bench-inputs.jsonl"
else
  python3 "$ROOT/tools/gpu-inputs.py" bench "$WORK/bench-inputs.jsonl"
fi
B_CPU=$(reference bench)
[[ -f "$B_CPU" || ! -d "$CKPT" ]] ||
  run_stage bench-cpu 400 "$RLP" replay --backend cpu --checkpoint "$CKPT" --inputs "$WORK/bench-inputs.jsonl" \
    --recipes $RECIPES_B --no-oracle -q --force -o "$B_CPU" >"$WORK/bench-cpu.log" 2>&1
for mode in cublaslt exact; do
  [[ -d "$CKPT" ]] || break
  t1=$(date +%s.%N)
  if RLPARITY_CUDA_GEMM_TIMING=1 run_stage bench-cuda-$mode 240 "$RLP" replay --backend cuda --cuda-gemm $mode \
       --checkpoint "$CKPT" --inputs "$WORK/bench-inputs.jsonl" --recipes $RECIPES_B --no-oracle -q --force \
       -o "$WORK/bench-cuda-$mode.h5" >"$WORK/bench-cuda-$mode.log" 2>&1; then
    t2=$(date +%s.%N)
    echo "--- --cuda-gemm $mode"
    cat "$WORK/bench-cuda-$mode.log"
    [[ -f "$B_CPU" ]] && compare bench-$mode "$B_CPU" "$WORK/bench-cuda-$mode.h5"
    stage "(c) GPU replay throughput (issue-4 benchmark, --backend cuda --cuda-gemm $mode, no oracle)"
    python3 - "$CKPT/config.json" "$WORK/bench-inputs.jsonl" "$t1" "$t2" 3 "$WORK/bench-cuda-$mode.log" "$PEAK_BF16_TFLOPS" <<'PY' | tee "$WORK/throughput-$mode.txt"
import json, re, sys
cfg = json.load(open(sys.argv[1]))
seqs = [json.loads(l) for l in open(sys.argv[2])]
secs = float(sys.argv[4]) - float(sys.argv[3])
recipes, peak = int(sys.argv[5]), float(sys.argv[7])
H, I, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
hd = H // cfg["num_attention_heads"]
kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd
params = L * (H * H + 2 * H * kv + H * H + 3 * H * I) + H * V  # decoder linears + lm_head
tokens = sum(len(s["prompt"]) + len(s["response"]) for s in seqs)
resp = sum(len(s["response"]) for s in seqs)
flops = 2.0 * params * tokens * 2 * recipes  # generation + training path per recipe
print(f"{len(seqs)} sequences, {tokens} tokens ({resp} response) x {recipes} recipes x 2 paths, no oracle")
print(f"  wall {secs:.2f} s (process start, checkpoint open, refit, HDF5 write included)")
print(f"  {resp * recipes / secs:.1f} response tokens scored per second (all recipes)")
print(f"  model GEMM work {flops * 1e-12:.3f} TFLOP -> {flops / secs * 1e-12:.3f} TFLOP/s over the wall time = "
      f"{flops / secs * 1e-12 / peak:.5f} of the dense bf16 peak ({peak} TFLOP/s)")
for m in re.finditer(r"GEMM timing \(([^)]*)\): (\d+) ([a-zA-Z -]+) calls, ([0-9.e+]+) GFLOP in ([0-9.e+-]+) s",
                     open(sys.argv[6]).read()):
    what, calls, kern, gf, gs = m.group(1), int(m.group(2)), m.group(3), float(m.group(4)), float(m.group(5))
    print(f"  inside the GEMM kernels ({kern}, {what}): {calls} calls, {gs:.3f} s of device time ({100 * gs / secs:.1f}% of the "
          f"wall), {gf * 1e-3 / gs:.2f} TFLOP/s = {gf * 1e-3 / gs / peak:.4f} of peak; mean {gs / calls * 1e6:.1f} us per call")
PY
  else
    tail -5 "$WORK/bench-cuda-$mode.log"
  fi
done
finish
