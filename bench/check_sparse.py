#!/usr/bin/python3
"""Checks a --sparse checkpoint against the dense one made with the same arguments.

  check_sparse.py DENSE_DIR SPARSE_DIR

For every file of the tag: same size, same zip record names and sizes, identical data.pkl, and
torch.load (torch 1.13, which does not check CRCs) loads the sparse file into the same structure,
with every tensor either equal to the dense one (records written in full) or all zeros (holes).
"""
import os
import sys
import zipfile

import torch


def walk(a, b, path, stats):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride(), path
        if torch.equal(a, b):
            stats["equal"] += 1
        else:
            assert not b.any(), f"{path}: neither equal nor a hole"
            stats["hole"] += 1
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), path
        for k in a:
            walk(a[k], b[k], f"{path}.{k}", stats)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", stats)
    elif hasattr(a, "t") and hasattr(a, "ds_id"):
        walk(a.t, b.t, path + ".t", stats)
    else:
        assert type(a) is type(b), path


def records(path):
    with zipfile.ZipFile(path) as z:
        infos = [(i.filename.split("/", 1)[1], i.file_size) for i in z.infolist()]
        pkl = next(z.read(i) for i in z.infolist() if i.filename.endswith("/data.pkl"))
    return infos, pkl


def main():
    dense, sparse = sys.argv[1:3]
    tag = open(os.path.join(dense, "latest")).read().strip()
    assert open(os.path.join(sparse, "latest")).read().strip() == tag
    names = sorted(os.listdir(os.path.join(dense, tag)))
    assert names == sorted(os.listdir(os.path.join(sparse, tag)))
    stats = {"equal": 0, "hole": 0}
    for nm in names:
        a, b = os.path.join(dense, tag, nm), os.path.join(sparse, tag, nm)
        assert os.path.getsize(a) == os.path.getsize(b), nm
        assert records(a) == records(b), nm
        walk(torch.load(a, map_location="cpu"), torch.load(b, map_location="cpu"), nm, stats)
    print(f"check_sparse: {len(names)} files OK; tensors equal {stats['equal']}, holes {stats['hole']}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tools"))
    import gen_ckpt  # noqa: F401  (registers the DeepSpeed stand-in classes torch.load needs)
    main()
