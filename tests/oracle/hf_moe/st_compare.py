#!/usr/bin/env python3
"""Compare two safetensors weights (a model.safetensors file, or a folder with model.safetensors or
model.safetensors.index.json + shards): key set, shapes, dtypes, and raw bytes per tensor. Pure Python
(no torch). Usage: st_compare.py A B [--json OUT]   (A = mount folder, B = Trainer's checkpoint-N)"""
import json, os, struct, sys


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (path, 8 + n, v) for k, v in h.items()}


def tensors(p):
    if os.path.isfile(p):
        return read_header(p), [os.path.basename(p)]
    idx = os.path.join(p, "model.safetensors.index.json")
    if os.path.exists(idx):
        wm = json.load(open(idx))["weight_map"]
        out = {}
        for f in sorted(set(wm.values())):
            out.update(read_header(os.path.join(p, f)))
        assert set(out) == set(wm), "index weight_map != shard keys"
        return out, sorted(set(wm.values())) + ["model.safetensors.index.json"]
    return read_header(os.path.join(p, "model.safetensors")), ["model.safetensors"]


def data(e):
    path, base, v = e
    a, b = v["data_offsets"]
    with open(path, "rb") as f:
        f.seek(base + a)
        return f.read(b - a)


def compare(A, B):
    ta, fa = tensors(A)
    tb, fb = tensors(B)
    ka, kb = set(ta), set(tb)
    r = {"a": A, "b": B, "files_a": fa, "files_b": fb, "keys_a": len(ka), "keys_b": len(kb),
         "keys_equal": ka == kb, "only_a": sorted(ka - kb)[:10], "only_b": sorted(kb - ka)[:10]}
    shape_bad, dtype_bad, bytes_bad = [], [], []
    for k in sorted(ka & kb):
        va, vb = ta[k][2], tb[k][2]
        if va["shape"] != vb["shape"]:
            shape_bad.append([k, va["shape"], vb["shape"]])
        if va["dtype"] != vb["dtype"]:
            dtype_bad.append([k, va["dtype"], vb["dtype"]])
        if data(ta[k]) != data(tb[k]):
            bytes_bad.append(k)
    r.update(shapes_equal=not shape_bad, dtypes_equal=not dtype_bad, bytes_equal=not bytes_bad and ka == kb,
             shape_bad=shape_bad[:10], dtype_bad=dtype_bad[:10], bytes_bad=bytes_bad[:10], n_bytes_bad=len(bytes_bad),
             dtypes_a=sorted({v[2]["dtype"] for v in ta.values()}), dtypes_b=sorted({v[2]["dtype"] for v in tb.values()}))
    return r


if __name__ == "__main__":
    r = compare(sys.argv[1], sys.argv[2])
    if "--json" in sys.argv:
        json.dump(r, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)
    print(json.dumps(r, indent=1))
