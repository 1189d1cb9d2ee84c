"""Browsing a mount without Python glue: <T>_params/ for people and numpy, <T>_fp32/model.safetensors
equal to DeepSpeed's own zero_to_fp32.py output (or, where it refuses, to the live engine's state), and
<T>_bf16|fp16/model.safetensors equal to the module weights DeepSpeed trained with."""
import json
import os
import re
import struct

import numpy as np
import pytest
import torch

from conftest import FIXTURES, live_state

TAG = "global_step3"
DTYPES = {"BF16": np.int16, "F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path):
    """A small independent reader: 8-byte header length, JSON header, then the data buffer."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    assert (8 + n) % 8 == 0, "tensor data must start 8-byte aligned"
    data = raw[8 + n:]
    header.pop("__metadata__", None)
    out, spans = {}, []
    for name, h in header.items():
        assert set(h) == {"dtype", "shape", "data_offsets"}
        a, b = h["data_offsets"]
        spans.append((a, b))
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[h["dtype"]]).reshape(h["shape"])
    spans.sort()
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(x[1] == y[0] for x, y in zip(spans, spans[1:])), "offsets must tile the buffer"
    return out


def as_torch(a, dtype):
    """A safetensors array as torch sees it (bf16 arrives as its raw 16 bits)."""
    t = torch.from_numpy(np.array(a))
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def assert_same(ours, want, what):
    t = as_torch(ours, want.dtype)
    assert t.dtype == want.dtype and tuple(t.shape) == tuple(want.shape), what
    assert torch.equal(t.view(torch.uint8), want.detach().contiguous().view(torch.uint8)), what


def test_model_safetensors_equals_zero_to_fp32(mnt):
    name, m = mnt
    ours = read_safetensors(f"{m}/{TAG}_fp32/model.safetensors")
    live = live_state(name)
    ref = os.path.join(FIXTURES, name, "zero_to_fp32", "model.safetensors")
    if os.path.exists(ref):
        theirs = read_safetensors(ref)
        for k in theirs:
            assert ours[k].dtype == theirs[k].dtype and ours[k].shape == theirs[k].shape, k
            assert ours[k].tobytes() == theirs[k].tobytes(), k
        bin_ = torch.load(os.path.join(FIXTURES, name, "zero_to_fp32", "pytorch_model.bin"), weights_only=True)
        assert set(bin_) == set(theirs)
        # zero_to_fp32.py drops ZeRO-1's frozen parameters; the model states hold them whole.
        assert set(ours) - set(theirs) <= set(live["frozen"])
    else:  # BF16_Optimizer: zero_to_fp32.py refuses it ("not a zero checkpoint")
        for k, v in live["fp32"].items():
            assert_same(ours[k], v, k)
        for k, v in live["buffers"].items():
            assert_same(ours[k], v, k)
    for k, v in live["frozen"].items():
        assert k in ours, f"frozen {k} is served"
        assert_same(ours[k], v, k)


TRAINING = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def test_training_precision_safetensors_equals_the_module(mnt):
    name, m = mnt
    live = live_state(name)
    lp = next(iter(live["lp"].values())).dtype
    folders = [d for d in os.listdir(m) if d in (f"{TAG}_bf16", f"{TAG}_fp16")]
    if lp not in TRAINING:
        assert folders == [], "fp32 runs get no training-precision folder"
        return
    assert folders == [f"{TAG}_{TRAINING[lp]}"]
    ours = read_safetensors(f"{m}/{TAG}_{TRAINING[lp]}/model.safetensors")
    for k, v in live["lp"].items():
        assert_same(ours[k], v, k)  # ZeRO-3: rounded from the fp32 master as DeepSpeed does it
    for k, v in list(live["frozen"].items()) + list(live["buffers"].items()):
        assert_same(ours[k], v, k)  # stored dtype: bf16/fp16 frozen parameters, fp32 buffers
    assert set(ours) == set(live["lp"]) | set(live["frozen"]) | set(live["buffers"])


def params_of(m):
    d = f"{m}/{TAG}_params"
    return sorted(p for p in os.listdir(d) if os.path.isdir(f"{d}/{p}"))


def test_npy_files_mmap_and_equal_universal(mnt):
    _, m = mnt
    n = 0
    for p in params_of(m):
        for state in ("fp32", "exp_avg", "exp_avg_sq"):
            a = np.load(f"{m}/{TAG}_params/{p}/{state}.npy", mmap_mode="r")
            t = torch.load(f"{m}/{TAG}_universal/zero/{p}/{state}.pt", weights_only=True)["param"]
            assert a.shape == tuple(t.shape) and a.dtype == np.float32
            assert np.array_equal(np.asarray(a), t.numpy())
            n += 1
    assert n == 27


def info_fields(text):
    fields = {}
    for line in text.splitlines():
        if line[:11].strip():
            fields[line[:11].strip()] = line[11:].strip()
    return fields


def test_info_is_right(mnt):
    name, m = mnt
    shapes = {p["name"]: p for p in json.loads(os.popen(
        f"{os.environ.get('ZEROMOUNT', 'zeromount')} inspect --json {FIXTURES}/{name}/checkpoint").read())["params"]}
    for p in params_of(m):
        path = f"{m}/{TAG}_params/{p}/info"
        with open(path) as f:
            text = f.read()
        assert os.stat(path).st_size == len(text.encode()), "stat size before reading equals the text read"
        info = info_fields(text)
        assert info["name"] == p
        assert info["shape"] == str(shapes[p]["shape"])
        assert info["numel"] == f"{shapes[p]['numel']:,}"
        assert info["group"].split()[0] == str(shapes[p]["group"])
        lp = next(iter(live_state(name)["lp"].values())).dtype
        assert info["module"].split()[0] == str(lp).replace("torch.", "")
        a = np.load(f"{m}/{TAG}_params/{p}/fp32.npy").astype(np.float64)
        for key, want in [("min", a.min()), ("max", a.max()), ("mean", a.mean()), ("std", a.std()),
                          ("L2 norm", np.linalg.norm(a))]:
            assert float(info[key]) == pytest.approx(want, rel=1e-6, abs=1e-9), (p, key)
        assert re.search(r"rank \d+: elements \[0, ", text)  # the first piece starts at element 0


def test_summary_lists_every_param_once_with_totals(mnt):
    _, m = mnt
    with open(f"{m}/{TAG}_params/summary") as f:
        lines = f.read().splitlines()
    rows = [l.split() for l in lines[1:] if l and not l.startswith("total")]
    total = [l for l in lines if l.startswith("total")]
    names = [r[0] for r in rows]
    assert sorted(names) == params_of(m) and len(set(names)) == len(names)
    numel = sum(int(r[-4].replace(",", "")) for r in rows)
    assert total and f"{numel:,}" in total[0].split()
    assert total[0].split()[1] == str(len(rows))


def test_readme(mnt):
    _, m = mnt
    with open(f"{m}/{TAG}_params/README") as f:
        assert "np.load" in f.read()
