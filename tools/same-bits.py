#!/usr/bin/env python3
"""Compare every dataset and numeric attribute of run files in two folders, bit for bit.

usage: tools/same-bits.py REF_DIR NEW_DIR FILE...

Text attributes that name a time, a version, a host, a path or the process's resources (seconds,
memory) are skipped (they differ between any two runs); everything else, datasets by their raw bytes, must be identical. Exit 0 when all are,
1 with the differing names otherwise. Needs h5py and numpy.
"""
import json
import sys

import h5py
import numpy as np

SKIP = ("created", "time", "version", "host", "path", "checkpoint", "command", "out", "wall", "seconds", "resources")


def scrub(v):
    """A JSON text attribute without its keys that name a time, a version, a host or a path."""
    if isinstance(v, (str, bytes)):
        try:
            d = json.loads(v)
        except ValueError:
            return v
        if isinstance(d, dict):
            return json.dumps({k: x for k, x in d.items() if k != "inputs" and not any(s in k.lower() for s in SKIP)},
                              sort_keys=True)
    return v


def items(f):
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out["D " + name] = np.asarray(obj[()])
        for k, v in obj.attrs.items():
            if any(s in k.lower() for s in SKIP):
                continue
            out[f"A {name}@{k}"] = scrub(v)

    visit("/", f)
    f.visititems(visit)
    return out


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "OSU":
        return bool(np.all(a == b))
    return a.tobytes() == b.tobytes()


def main():
    ref, new, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    bad = 0
    for name in files:
        with h5py.File(f"{ref}/{name}", "r") as fa, h5py.File(f"{new}/{name}", "r") as fb:
            a, b = items(fa), items(fb)
            for k in sorted(set(a) | set(b)):
                if k not in a or k not in b:
                    print(f"{name}: {k} only in {'new' if k in b else 'ref'}")
                    bad += 1
                elif not same(a[k], b[k]):
                    print(f"{name}: {k} differs")
                    bad += 1
            print(f"{name}: {len(a)} items compared")
    print("same bits" if bad == 0 else f"{bad} differences")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
