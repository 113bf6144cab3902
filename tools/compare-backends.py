#!/usr/bin/env python3
"""Per-token agreement of two rlparity run files over the same tokens (e.g. --backend cpu and cuda).

usage: tools/compare-backends.py CPU.h5 CUDA.h5 [--json OUT.json]

For every recipe in both files and each of its paths (logp_gen: the generation path, logp_train:
the training path), prints the number of response tokens, the fraction whose logprob is
bit-identical (float64 bit patterns, the values rlparity stores), the largest and the mean absolute
difference, and the same for the gen-train log-ratio the recipe reports. Both files must hold the
same inputs (token ids, offsets, prompt lengths): it refuses otherwise (exit 2).
Needs h5py and numpy.
"""
import json
import sys

import h5py
import numpy as np


def fail(msg):
    print(f"compare-backends: error: {msg}", file=sys.stderr)
    sys.exit(2)


def order(f):
    return json.loads(f["/recipes"].attrs["order"])


def agreement(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    same = a.view(np.uint64) == b.view(np.uint64)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a[finite] - b[finite])
    return {
        "tokens": int(a.size),
        "bitwise_frac": float(same.mean()) if a.size else float("nan"),
        "max_abs_diff": float(diff.max()) if diff.size else 0.0,
        "mean_abs_diff": float(diff.mean()) if diff.size else 0.0,
        "nonfinite_mismatch": int((np.isfinite(a) != np.isfinite(b)).sum()),
    }


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        if i + 1 >= len(argv):
            fail("--json needs a file name")
        out_json = argv[i + 1]
        args = [a for a in args if a != out_json]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        fa, fb = h5py.File(args[0], "r"), h5py.File(args[1], "r")
    except OSError as e:
        fail(str(e))
    for ds in ("token_ids", "seq_offsets", "prompt_lengths"):
        if not np.array_equal(fa["/inputs/" + ds][:], fb["/inputs/" + ds][:]):
            fail(f"/inputs/{ds} differs between {args[0]} and {args[1]}: not the same tokens")
    result = {"a": args[0], "b": args[1], "backend_a": str(fa.attrs.get("backend", "?")),
              "backend_b": str(fb.attrs.get("backend", "?")), "recipes": {}}
    common = [r for r in order(fa) if r in order(fb)]
    print(f"{args[0]} ({result['backend_a']}) vs {args[1]} ({result['backend_b']})")
    print(f"  {'recipe':<12} {'path':<10} {'tokens':>7} {'bit-identical':>14} {'max |diff|':>11} {'mean |diff|':>11}")
    for r in common:
        rec = {}
        for path, name in (("gen", "logp_gen"), ("train", "logp_train"), ("log_ratio", "log_ratio")):
            ta, tb = fa[f"/recipes/{r}/tokens"], fb[f"/recipes/{r}/tokens"]
            if name not in ta or name not in tb:
                continue
            s = agreement(ta[name][:], tb[name][:])
            rec[path] = s
            print(f"  {r:<12} {path:<10} {s['tokens']:>7} {100 * s['bitwise_frac']:>13.3f}% "
                  f"{s['max_abs_diff']:>11.3e} {s['mean_abs_diff']:>11.3e}")
        result["recipes"][r] = rec
    if out_json:
        with open(out_json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
