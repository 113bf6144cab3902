#!/usr/bin/env bash
# The refactoring check: a fixed set of replays, inspects and compares whose every HDF5 dataset must
# be bit-identical before and after a change that claims to keep the numerics (issue 13's "same
# output bits"). Writes the run files under DIR; with a second argument REF (an earlier DIR) it then
# compares every dataset and numeric attribute of each file with REF's (tools/same-bits.py).
#
#   tools/same-bits.sh BUILD_DIR DIR [REF]
#
# Cases: stories260K with all five recipes and layer/knob attribution; a Qwen2 checkpoint with the
# fp8 KV cache (fp8-e2e-kv, vLLM's scale method); a Llama checkpoint with split-KV decode attention
# and fp32 residuals; an inspect of the Llama checkpoint; the Llama with both paths teacher-forced
# (one form: groups of one sequence per worker, blocks of one group); a Llama whose linears are whole
# 128x128 blocks (fp8-e2e's two refits share one form); a Qwen2-MoE checkpoint (shared expert,
# near-tied routers) with routing replay ids+weights. About a minute on 2 cores.
set -euo pipefail
BUILD=$1 OUT=$2 REF=${3:-}
cd "$(dirname "$0")/.."
RLP=$BUILD/rlparity MK=$BUILD/tools/rlparity_make_checkpoint
mkdir -p "$OUT"
[[ -d $OUT/qwen2 ]] || $MK --arch qwen2 --hidden 256 --intermediate 512 --layers 2 --heads 4 --kv-heads 2 \
  --vocab 512 --seed 7 --dtype bf16 --out "$OUT/qwen2" >/dev/null
[[ -d $OUT/llama ]] || $MK --arch llama3 --hidden 128 --intermediate 384 --layers 3 --heads 4 --kv-heads 2 \
  --vocab 384 --seed 11 --out "$OUT/llama" >/dev/null
[[ -d $OUT/llama128 ]] || $MK --arch llama --hidden 256 --intermediate 384 --layers 2 --heads 4 --kv-heads 2 \
  --vocab 384 --seed 13 --dtype bf16 --out "$OUT/llama128" >/dev/null
[[ -d $OUT/qwen2moe ]] || $MK --arch qwen2-moe --hidden 128 --layers 2 --heads 4 --kv-heads 2 --vocab 512 \
  --experts 6 --top-k 2 --router-near-tie --seed 5 --dtype bf16 --out "$OUT/qwen2moe" >/dev/null
common=(--force -q --threads 2 --max-new-tokens 12)
# Prompts inside every checkpoint's vocabulary (the bundled ones are stories260K's).
printf '%s\n' '{"id":"a","prompt":[1,17,250,3,99,12,301,5,44,7,200,13,88,9,150,2,77,310,61,33]}' \
  '{"id":"b","prompt":[1,5,9,300]}' '{"id":"c","prompt":[1,120,121,122,123,124,125,126,127,128,129,130,131,132,133,134,135,136,137,138,139,140,141,142,143,144,145,146,147,148,149,150,151,152,153]}' >"$OUT/prompts.jsonl"
$RLP replay "${common[@]}" --recipes bf16,fp8-gen,fp8-e2e,fp8-e2e-kv,fp16 --attribute layers,knobs \
  -o "$OUT/stories.h5"
$RLP replay "${common[@]}" --checkpoint "$OUT/qwen2" --recipes fp8-e2e-kv,bf16 --kv-scale-method vllm \
  --pow2-scales --inputs "$OUT/prompts.jsonl" -o "$OUT/qwen2.h5"
$RLP replay "${common[@]}" --checkpoint "$OUT/llama" --recipes bf16,fp8-gen --gen-attention split-kv:8 \
  --gen-attn-block 4 --train-residual fp32 --gen-fp8-accum hopper --inputs "$OUT/prompts.jsonl" -o "$OUT/llama.h5"
$RLP inspect --force -q --checkpoint "$OUT/llama" -o "$OUT/inspect.h5"
$RLP replay "${common[@]}" --checkpoint "$OUT/llama" --recipes bf16 --gen-mode teacher-forced \
  --inputs "$OUT/prompts.jsonl" -o "$OUT/teacher.h5"
$RLP replay "${common[@]}" --checkpoint "$OUT/llama128" --recipes fp8-gen,fp8-e2e --inputs "$OUT/prompts.jsonl" \
  -o "$OUT/llama128.h5"
$RLP replay "${common[@]}" --checkpoint "$OUT/qwen2moe" --recipes bf16,fp8-e2e --routing-replay ids+weights \
  --inputs "$OUT/prompts.jsonl" -o "$OUT/qwen2moe.h5"
if [[ -n $REF ]]; then
  /usr/bin/python3 tools/same-bits.py "$REF" "$OUT" stories.h5 qwen2.h5 llama.h5 inspect.h5 teacher.h5 llama128.h5 qwen2moe.h5
fi
