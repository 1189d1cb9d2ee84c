"""What Python torch sees in a .pt file, in the JSON form `zeromount dump --json` writes.

Used by test_format.py to cross-check the C++ reader on every fixture file."""
import collections
import json
import sys
import zipfile
import zlib

import torch

import dsstub  # noqa: F401


def tensor_crc(t):
    if not t.is_contiguous():
        return None
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        return 0
    return zlib.crc32(flat.view(torch.uint8).numpy().tobytes())


def enc(v):
    if v is None:
        return {"t": "none"}
    if isinstance(v, bool):
        return {"t": "bool", "v": v}
    if isinstance(v, int):
        return {"t": "int", "v": v if -2**63 <= v < 2**63 else None}
    if isinstance(v, float):
        return {"t": "float", "v": v}
    if isinstance(v, str):
        return {"t": "str", "v": v}
    if isinstance(v, (bytes, bytearray)):
        return {"t": "bytes", "len": len(v)}
    if isinstance(v, torch.Tensor):
        return {"t": "tensor", "dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape),
                "stride": list(v.stride()), "offset": v.storage_offset(), "crc": tensor_crc(v)}
    if isinstance(v, torch.dtype):
        return {"t": "global", "v": str(v)}
    if isinstance(v, dict):
        return {"t": "dict", "ordered": isinstance(v, collections.OrderedDict),
                "items": [[enc(k), enc(x)] for k, x in v.items()]}
    if isinstance(v, (list, tuple)):
        return {"t": "list" if isinstance(v, list) else "tuple", "items": [enc(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"t": "set", "len": len(v)}
    return {"t": "object", "class": f"{type(v).__module__}.{type(v).__name__}"}


def manifest(path):
    with zipfile.ZipFile(path) as z:
        prefix = z.namelist()[0].split("/")[0]
    obj = torch.load(path, map_location="cpu")
    return {"prefix": prefix, "tree": enc(obj)}


if __name__ == "__main__":
    print(json.dumps(manifest(sys.argv[1])))
