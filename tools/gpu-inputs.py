#!/usr/bin/env python3
"""Inputs of the device check (tools/gpu-check.sh, tools/gpu-bundle.sh).

usage: tools/gpu-inputs.py bench OUT.jsonl        the issue-4 benchmark's inputs: 16 sequences of
                                                  64 prompt + 192 response token ids (seeded)
       tools/gpu-inputs.py extract RUN.h5 OUT.jsonl  a run file's tokens as rlparity JSONL with
                                                  responses, so that another run replays them
"""
import json
import random
import sys


def bench(out):
    rng = random.Random(4)
    with open(out, "w") as f:
        for i in range(16):
            f.write(json.dumps({"id": f"b{i}", "prompt": [rng.randrange(3, 32000) for _ in range(64)],
                                "response": [rng.randrange(3, 32000) for _ in range(192)]}) + "\n")


def extract(run, out):
    import h5py
    f = h5py.File(run, "r")
    ids, off, pl = f["/inputs/token_ids"][:], f["/inputs/seq_offsets"][:], f["/inputs/prompt_lengths"][:]
    with open(out, "w") as o:
        for i in range(len(pl)):
            seq = [int(t) for t in ids[off[i]:off[i + 1]]]
            o.write(json.dumps({"id": f"s{i}", "prompt": seq[:pl[i]], "response": seq[pl[i]:]}) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "bench":
        bench(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
