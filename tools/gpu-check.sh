#!/usr/bin/env bash
# The prepared device check of the CUDA backend (issue 8), in one command on any Debian machine with
# an NVIDIA GPU and the CUDA toolkit (nvcc under /usr/local/cuda or on PATH):
#
#   tools/gpu-check.sh
#
# It installs the Debian dependencies (tools/setup.sh), configures and builds the few targets it
# needs in build/gpu-check (CUDA code for this machine's GPU only), then prints
#   (a) per op: bitwise match rate and max ulp difference between the CPU emulator and the GPU
#       (the cross-backend suite, tests/gpu/cross_backend_ops_test.cpp);
#   (b) per recipe: the summary statistics of `rlparity replay` on both backends over identical
#       tokens, side by side (bundled stories260K, and a generated Llama-shaped checkpoint);
#   (c) GPU replay throughput (response tokens x recipes / wall seconds).
# Every stage has its own time limit; the whole is meant to finish within 8 minutes on one
# H100/H200 including the build. Exit status: 0 when every stage passed, 1 otherwise (the stages
# after a failed one still run where they can). When $OUT is set, logs and run files are copied there.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${RLPARITY_GPU_CHECK_BUILD:-$ROOT/build/gpu-check}
WORK=$BUILD/gpu-check-work
JOBS=$(nproc)
T0=$(date +%s)
FAILED=()

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
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then cp -f "$WORK"/*.log "$WORK"/*.txt "$OUT"/ 2>/dev/null || true; fi
  if ((${#FAILED[@]})); then
    printf 'FAILED: %s\n' "${FAILED[@]}"
    exit 1
  fi
  echo "all stages passed"
  exit 0
}

stage "setup (Debian packages)"
RLPARITY_SETUP_EXTRAS=0 run_stage setup 300 tools/setup.sh || finish
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
if ! command -v nvcc >/dev/null; then
  echo "!!! no nvcc found (PATH or /usr/local/cuda/bin): the CUDA backend cannot be built here"
  FAILED+=("toolkit")
  finish
fi
nvcc --version | tail -1
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader || true
fi
mkdir -p "$WORK"

stage "configure + build (-j$JOBS)"
# native: CUDA code for the GPUs of this machine only (fast build); falls back to 80;90.
ARCH=native
nvidia-smi >/dev/null 2>&1 || ARCH="80;90"
run_stage configure 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRLPARITY_ENABLE_BENCH=OFF -DRLPARITY_NATIVE=ON "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" >"$WORK/configure.log" 2>&1 ||
  { tail -30 "$WORK/configure.log"; finish; }
grep -q "CUDA backend ON" "$WORK/configure.log" || { echo "!!! CMake did not enable the CUDA backend"; tail -30 "$WORK/configure.log"; FAILED+=("cuda-config"); finish; }
run_stage build 330 cmake --build "$BUILD" -j"$JOBS" --target rlparity gpu_cross_backend_ops_test gpu_cuda_casts_test \
  rlparity_make_checkpoint >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; finish; }
RLP=$BUILD/rlparity

stage "(a) cross-backend op suite: CPU emulator vs GPU"
run_stage cast-tests 60 "$BUILD/gpu_cuda_casts_test" >"$WORK/cuda_casts_test.log" 2>&1
tail -3 "$WORK/cuda_casts_test.log"
run_stage op-suite 180 "$BUILD/gpu_cross_backend_ops_test" >"$WORK/cross_backend_ops_test.log" 2>&1
grep -E '^\[op-table\]' "$WORK/cross_backend_ops_test.log" | sed 's/^\[op-table\] //' | tee "$WORK/op-table.txt"
grep -E 'SKIPPED|FAILED|Failure|Expected|NMSE|differ' "$WORK/cross_backend_ops_test.log" | head -40
tail -3 "$WORK/cross_backend_ops_test.log"

# Inputs with responses, taken from a run file, so both backends replay identical tokens.
extract_inputs() {  # RUN.h5 OUT.jsonl
  python3 - "$1" "$2" <<'PY'
import h5py, json, sys
f = h5py.File(sys.argv[1], "r")
ids, off, pl = f["/inputs/token_ids"][:], f["/inputs/seq_offsets"][:], f["/inputs/prompt_lengths"][:]
with open(sys.argv[2], "w") as out:
    for i in range(len(pl)):
        seq = [int(t) for t in ids[off[i]:off[i + 1]]]
        out.write(json.dumps({"id": f"s{i}", "prompt": seq[:pl[i]], "response": seq[pl[i]:]}) + "\n")
PY
}
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

stage "(b) replay stories260K (bundled) on both backends"
RECIPES_S=bf16,fp8-gen,fp8-e2e,fp8-e2e-kv
if run_stage stories-cpu 120 "$RLP" replay --backend cpu --recipes $RECIPES_S -q --force -o "$WORK/stories-cpu.h5" \
     >"$WORK/stories-cpu.log" 2>&1 &&
   extract_inputs "$WORK/stories-cpu.h5" "$WORK/stories-inputs.jsonl" &&
   run_stage stories-cuda 120 "$RLP" replay --backend cuda --recipes $RECIPES_S --inputs "$WORK/stories-inputs.jsonl" \
     -q --force -o "$WORK/stories-cuda.h5" >"$WORK/stories-cuda.log" 2>&1; then
  cat "$WORK/stories-cuda.log"
  side_by_side stories "$WORK/stories-cpu.h5" "$WORK/stories-cuda.h5" || FAILED+=("stories summary")
else
  tail -5 "$WORK"/stories-*.log
fi

stage "(b) replay a generated Llama-shaped checkpoint (hidden 1024, 8 layers, vocab 32000) on both backends"
CKPT=$WORK/llama-1024x8
run_stage make-checkpoint 120 "$BUILD/rlparity_make_checkpoint" --arch llama --hidden 1024 --intermediate 2816 \
  --layers 8 --heads 16 --kv-heads 8 --vocab 32000 --max-pos 2048 --dtype bf16 --seed 7 --out "$CKPT" \
  >"$WORK/make-checkpoint.log" 2>&1 || { cat "$WORK/make-checkpoint.log"; rm -rf "$CKPT"; }
python3 - "$WORK/gen-prompts.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(6):
        f.write(json.dumps({"id": f"p{i}", "prompt": [rng.randrange(3, 32000) for _ in range(24)]}) + "\n")
PY
RECIPES_G=bf16,fp8-gen,fp8-e2e
if [[ -d "$CKPT" ]] &&
   run_stage gen-cpu 200 "$RLP" replay --backend cpu --checkpoint "$CKPT" --inputs "$WORK/gen-prompts.jsonl" \
     --recipes $RECIPES_G --max-new-tokens 24 --temperature 1 --no-oracle -q --force -o "$WORK/gen-cpu.h5" \
     >"$WORK/gen-cpu.log" 2>&1 &&
   extract_inputs "$WORK/gen-cpu.h5" "$WORK/gen-inputs.jsonl"; then
  t1=$(date +%s.%N)
  if run_stage gen-cuda 150 "$RLP" replay --backend cuda --checkpoint "$CKPT" --inputs "$WORK/gen-inputs.jsonl" \
       --recipes $RECIPES_G --no-oracle -q --force -o "$WORK/gen-cuda.h5" >"$WORK/gen-cuda.log" 2>&1; then
    t2=$(date +%s.%N)
    cat "$WORK/gen-cuda.log"
    side_by_side generated "$WORK/gen-cpu.h5" "$WORK/gen-cuda.h5" || FAILED+=("generated summary")
    stage "(c) GPU replay throughput"
    python3 - "$WORK/gen-inputs.jsonl" "$t1" "$t2" 3 <<'PY' | tee "$WORK/throughput.txt"
import json, sys
tokens = sum(len(json.loads(l)["response"]) for l in open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
recipes = int(sys.argv[4])
print(f"generated checkpoint, --backend cuda, {recipes} recipes x (generation + training path), no oracle:")
print(f"  {tokens} response tokens x {recipes} recipes in {secs:.1f} s wall (incl. load, refit, KV scales on the CPU)")
print(f"  = {tokens * recipes / secs:.1f} replayed tokens/s")
PY
  else
    tail -5 "$WORK/gen-cuda.log"
  fi
else
  tail -5 "$WORK"/gen-cpu.log 2>/dev/null
fi
finish
