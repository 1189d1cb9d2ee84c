#!/usr/bin/python3
"""Generate synthetic DeepSpeed-shaped ZeRO checkpoints (stage 1, 2 or 3, fp32).

The files are keyed like real DeepSpeed 0.19.6 output (see tests/fixtures and
docs/spec/deepspeed-checkpoint-formats.md): same dict keys, insertion order and pickled
types (ZeroStageEnum, LossScaler, fragment_address, torch.Size, OrderedDict with `_metadata`,
set(), ...). Stage-1/2 module weights are views into one padded flat buffer per param group, the
stage-1/2 fp32 partition is a prefix view of the padded partition, and stage-3 `fp32_flat_groups`
carry a `ds_id` attribute (pickled through `torch._tensor._rebuild_from_type_v2`, as torch >= 2.0
does), like in the fixtures.

Values are deterministic and position-addressable: element i of state s (fp32 / exp_avg /
exp_avg_sq) of the parameter with ds_id d is a hash of (seed, d, s, i). Any slice of any parameter
can therefore be produced without generating the rest, and the same --seed gives the same logical
model for every stage and every --dp (only the partitioning changes).

Usage:
  gen_ckpt.py OUT_DIR --stage {1,2,3} --dp W [--params N] [--numel-min a --numel-max b | --sizes L]
              [--groups G] [--sub-group-size S] [--frozen K] [--seed N] [--tag TAG] [--dtype fp32|bf16]
              [--expected DIR]
"""
import argparse
import ctypes
import filecmp
import json
import math
import os
import pickle
import sys
import struct
import tempfile
import time
import types
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch

DS_VERSION = "0.19.6+edaa72212"
LR = 0.0028000000000000004  # what the fixtures' WarmupLR had after 3 steps
BETAS = (0.9, 0.99)         # one shared tuple object, as in the fixtures (memoised by pickle)


# --------------------------------------------------------------------------------------------
# Stand-ins for the DeepSpeed classes that appear in the pickles. pickle looks classes up as
# sys.modules[cls.__module__].<cls.__qualname__>, so they must live in registered modules.
# --------------------------------------------------------------------------------------------

def _ds_module(name):
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
    return mod


for _m in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.fp16",
           "deepspeed.runtime.fp16.loss_scaler", "deepspeed.runtime.zero",
           "deepspeed.runtime.zero.config", "deepspeed.utils", "deepspeed.utils.tensor_fragment"):
    _ds_module(_m)


class LossScaler:
    """Pickles as GLOBAL + EMPTY_TUPLE + NEWOBJ + BUILD {'cur_scale', 'dynamic'}."""

    def __init__(self, scale=1.0):
        self.cur_scale = scale
        self.dynamic = False


LossScaler.__module__ = "deepspeed.runtime.fp16.loss_scaler"
LossScaler.__qualname__ = "LossScaler"
sys.modules[LossScaler.__module__].LossScaler = LossScaler


class ZeroStageEnum(int, Enum):
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3
    max_stage = 3

    def __reduce_ex__(self, proto):
        # REDUCE(ZeroStageEnum, (2,)) like the fixtures (Debian's CPython 3.11.2 would otherwise
        # emit REDUCE(getattr, (ZeroStageEnum, 'gradients'))).
        return (self.__class__, (int(self),))


ZeroStageEnum.__module__ = "deepspeed.runtime.zero.config"
ZeroStageEnum.__qualname__ = "ZeroStageEnum"
sys.modules[ZeroStageEnum.__module__].ZeroStageEnum = ZeroStageEnum


@dataclass
class fragment_address:  # noqa: N801 (DeepSpeed's name)
    numel: int
    start: int


fragment_address.__module__ = "deepspeed.utils.tensor_fragment"
fragment_address.__qualname__ = "fragment_address"
sys.modules[fragment_address.__module__].fragment_address = fragment_address


class _DsIdTensor:
    """A tensor pickled the way torch >= 2.0 pickles a tensor carrying a Python attribute:
    _rebuild_from_type_v2(_rebuild_tensor_v2, Tensor, args, {'ds_id': ...})."""

    __slots__ = ("t", "ds_id")

    def __init__(self, t, ds_id):
        self.t = t
        self.ds_id = ds_id

    def __reduce_ex__(self, proto):
        func, args = self.t._reduce_ex_internal(proto)
        return (torch._tensor._rebuild_from_type_v2, (func, torch.Tensor, args, {"ds_id": self.ds_id}))


# --------------------------------------------------------------------------------------------
# Deterministic, position-addressable values
# --------------------------------------------------------------------------------------------

M32 = 0xFFFFFFFF
GOLD = np.uint32(0x9E3779B1)
C1 = np.uint32(0x85EBCA6B)
C2 = np.uint32(0xC2B2AE35)
ST_FP32, ST_AVG, ST_AVGSQ = 0, 1, 2
STATES = ("fp32", "exp_avg", "exp_avg_sq")
CHUNK = 1 << 22  # elements per vectorised batch


def _fmix32_int(h):
    h &= M32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    h ^= h >> 16
    return h


def value_key(seed, ds_id, state):
    return _fmix32_int((seed * 0x27D4EB2F) ^ _fmix32_int(ds_id * 3 + state + 0x165667B1) ^ 0x5BD1E995)


def _to_values(h, state):
    """uint32 hash array (modified in place) -> float32 values of the given state."""
    h ^= h >> 16
    h *= C1
    h ^= h >> 13
    h *= C2
    h ^= h >> 16
    h >>= 8
    f = h.astype(np.float32)
    f *= np.float32(2.0 ** -24)  # [0, 1)
    if state == ST_FP32:
        f -= np.float32(0.5)
        f *= np.float32(0.2)
    elif state == ST_AVG:
        f -= np.float32(0.5)
        f *= np.float32(2e-3)
    else:
        f *= np.float32(1e-5)
    return f


def gen_values(key, start, count, state):
    """Elements [start, start+count) of the flattened tensor with hash key `key`."""
    h = np.arange(start, start + count, dtype=np.int64).astype(np.uint32)
    h *= GOLD
    h += np.uint32(key)
    return _to_values(h, state)


def fill(dests, keys, i0, cnt, dst, states):
    """Write segments into flat float32 arrays.

    dests[j] is the destination of state states[j]; keys[j] an array of per-segment hash keys.
    Segment m: elements [i0[m], i0[m]+cnt[m]) of its tensor go to dests[j][dst[m]:dst[m]+cnt[m]].
    Positions not covered by a segment are left as they are (zeros = padding)."""
    i0 = np.asarray(i0, dtype=np.int64)
    cnt = np.asarray(cnt, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    keys = [np.asarray(k, dtype=np.uint32) for k in keys]
    keep = cnt > 0
    if not keep.all():
        i0, cnt, dst = i0[keep], cnt[keep], dst[keep]
        keys = [k[keep] for k in keys]
    m = len(cnt)
    if m == 0:
        return
    cum = np.cumsum(cnt)
    a = 0
    while a < m:
        base = int(cum[a - 1]) if a else 0
        if cnt[a] > CHUNK:  # one big segment, in chunks
            n = int(cnt[a])
            for c0 in range(0, n, CHUNK):
                c = min(CHUNK, n - c0)
                d = int(dst[a]) + c0
                for dest, k, st in zip(dests, keys, states):
                    dest[d:d + c] = gen_values(int(k[a]), int(i0[a]) + c0, c, st)
            a += 1
            continue
        b = int(np.searchsorted(cum, base + CHUNK, side="right"))
        b = max(b, a + 1)
        c = cnt[a:b]
        tot = int(cum[b - 1]) - base
        cs = cum[a:b] - c - base  # segment starts inside the batch
        idx = np.arange(tot, dtype=np.int64)
        idx += np.repeat(i0[a:b] - cs, c)
        h0 = idx.astype(np.uint32)
        h0 *= GOLD
        shift = dst[a:b] - cs
        if (shift == shift[0]).all():
            pos = slice(int(shift[0]), int(shift[0]) + tot)
        else:
            pos = np.arange(tot, dtype=np.int64)
            pos += np.repeat(shift, c)
        for dest, k, st in zip(dests, keys, states):
            h = h0 + np.repeat(k[a:b], c)
            dest[pos] = _to_values(h, st)
        a = b


# --------------------------------------------------------------------------------------------
# Buffers: plain numpy, or file-backed (unlinked temp file) for very large ones
# --------------------------------------------------------------------------------------------

class Alloc:
    def __init__(self, tmpdir, mmap_min_bytes):
        self.tmpdir = tmpdir
        self.mmap_min = mmap_min_bytes

    def zeros(self, n, dtype=np.float32):
        nbytes = n * np.dtype(dtype).itemsize
        if self.mmap_min and nbytes >= self.mmap_min:
            fd, path = tempfile.mkstemp(prefix=".gen_ckpt_", dir=self.tmpdir)
            try:
                os.ftruncate(fd, max(nbytes, 1))  # sparse: pages are only allocated when written
                arr = np.memmap(path, dtype=dtype, mode="r+", shape=(n,))
            finally:
                os.close(fd)
                os.unlink(path)
            return arr
        return np.zeros(n, dtype=dtype)


# --------------------------------------------------------------------------------------------
# --sparse: torch's records, written by our own zip writer with the tensor bytes as holes
# --------------------------------------------------------------------------------------------

ZIP_BIG = 0xFFFFFFFF
ZIP_ALIGN = 64


class _RecordCapture:
    """Stands in for torch._C.PyTorchFileWriter in torch.serialization._save: keeps the
    write_record calls (name, bytes or data pointer, size) and writes nothing."""

    def __init__(self):
        self.records = []

    def write_record(self, name, data, n):
        self.records.append((name, data, int(n)))


def capture_records(obj):
    """The records torch.save(obj) would write, in its order (torch 1.13: data.pkl, data/<key>
    in string order, version). Tensor records carry a data pointer into the live storage."""
    cap = _RecordCapture()
    torch.serialization._save(obj, cap, pickle, torch.serialization.DEFAULT_PROTOCOL)
    cap.records.append(("version", b"3\n", 2))  # PyTorchStreamWriter::writeEndOfFile
    return cap.records


def write_zip(path, records, hole_min):
    """Writes the torch.save zip container (torch-save-format.md §1.2, byte-identical layout to
    torch 1.13's PyTorchStreamWriter) for `records`. Tensor records of hole_min bytes or more are
    not written: the file gets a hole there (reads as zeros) and the CRC is 0, which torch.load
    never checks. Smaller records are copied from their storage with their real CRC.
    Returns (apparent size, number of hole bytes)."""
    prefix = os.path.splitext(os.path.basename(path))[0] + "/"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        buf = bytearray()
        buf_ofs = 0  # file offset of buf[0]
        ofs = 0      # file offset of the next byte
        cd = bytearray()
        n = 0
        holes = 0
        for rec, data, size in records:
            name = (prefix + rec).encode()
            if isinstance(data, (bytes, bytearray)):
                payload = bytes(data)
            elif size < hole_min:
                payload = ctypes.string_at(data, size) if size else b""
            else:
                payload = None
            lz = cz = b""
            if size >= ZIP_BIG or ofs >= ZIP_BIG:
                lb = ((struct.pack("<QQ", size, 0) if size >= ZIP_BIG else b"")
                      + (struct.pack("<Q", ofs) if ofs >= ZIP_BIG else b""))
                cb = ((struct.pack("<QQ", size, size) if size >= ZIP_BIG else b"")
                      + (struct.pack("<Q", ofs) if ofs >= ZIP_BIG else b""))
                lz, cz = struct.pack("<HH", 1, len(lb)) + lb, struct.pack("<HH", 1, len(cb)) + cb
            start = ofs + 30 + len(name) + len(lz) + 4
            pad = (-start) % ZIP_ALIGN
            extra = lz + b"FB" + struct.pack("<H", pad) + b"Z" * pad
            flags = 0x0800 | (0x0008 if size else 0)
            crc = (zlib.crc32(payload) & ZIP_BIG) if (payload is not None and size) else 0
            buf += struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0,
                               len(name), len(extra))
            buf += name
            buf += extra
            if payload is not None:
                buf += payload
            else:  # the hole
                os.pwrite(fd, buf, buf_ofs)
                buf_ofs += len(buf) + size
                buf = bytearray()
                holes += size
            if size:
                buf += (struct.pack("<IIQQ", 0x08074B50, crc, size, size) if lz
                        else struct.pack("<IIII", 0x08074B50, crc, size, size))
            cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, flags, 0, 0, 0, crc,
                              min(size, ZIP_BIG), min(size, ZIP_BIG), len(name), len(cz), 0, 0, 0, 0,
                              min(ofs, ZIP_BIG))
            cd += name
            cd += cz
            n += 1
            ofs = buf_ofs + len(buf)
            if len(buf) >= 1 << 20:
                os.pwrite(fd, buf, buf_ofs)
                buf_ofs = ofs
                buf = bytearray()
        cd_ofs, cd_size = ofs, len(cd)
        buf += cd
        z64 = cd_ofs + cd_size
        buf += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 0x002D, 0, 0, n, n, cd_size, cd_ofs)
        buf += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        buf += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF),
                           min(cd_size, ZIP_BIG), min(cd_ofs, ZIP_BIG), 0)
        os.pwrite(fd, buf, buf_ofs)
        total = buf_ofs + len(buf)
    finally:
        os.close(fd)
    return total, holes


def _save_capture(obj, path):
    """torch.save(obj, path) (torch 1.13 zip path) that also returns the write_record calls."""

    class _Cap:
        def __init__(self, writer):
            self.writer = writer
            self.records = []

        def write_record(self, name, data, n):
            self.records.append((name, data, n))
            self.writer.write_record(name, data, n)

    try:
        cap = _Cap(torch._C.PyTorchFileWriter(str(path)))
    except Exception:
        return None
    try:
        torch.serialization._save(obj, cap, pickle, torch.serialization.DEFAULT_PROTOCOL)
        cap.writer.write_end_of_file()
    except Exception:
        return None
    finally:
        cap.writer = None  # closes the file
    return cap.records


def _replay(records, path):
    writer = torch._C.PyTorchFileWriter(str(path))
    for name, data, n in records:
        writer.write_record(name, data, n)
    writer.write_end_of_file()
    del writer


def T(arr):
    return torch.from_numpy(arr)


# --------------------------------------------------------------------------------------------
# Synthetic model
# --------------------------------------------------------------------------------------------

class Param:
    __slots__ = ("name", "shape", "numel", "ds_id", "group", "trainable")

    def __init__(self, name, shape, ds_id, group, trainable):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.numel = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        self.ds_id = ds_id
        self.group = group
        self.trainable = trainable


def _shape_2d(rng, a, b):
    target = int(rng.integers(a, b + 1))
    if target < 2:
        return (1, target)
    cols = int(rng.integers(1, math.isqrt(target) + 1))
    rows = target // cols
    if rows * cols < a:
        rows += 1
    if rows * cols > b or rows < 1:
        return (target, 1)
    return (rows, cols)


def _parse_sizes(text):
    shapes = []
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        shapes.append(tuple(int(d) for d in item.lower().split("x")))
    return shapes


# Llama-style architectures for --arch: (layers, hidden, heads, kv_heads, ffn, vocab).
ARCHS = {
    "small": (2, 64, 4, 2, 160, 300),
    "llama70b": (80, 8192, 64, 8, 28672, 128256),  # Llama-2/3 70B shapes, untied lm_head
}


# MoE models as transformers 5 holds them at run time (what DeepSpeed saves): experts packed into
# mlp.experts.gate_up_proj [E, 2F, H] and mlp.experts.down_proj [E, H, F], the router mlp.gate.
# (layers, hidden, heads, kv_heads, expert ffn, vocab, experts, qk norms)
MOE_ARCHS = {
    "mixtral_small": (2, 64, 4, 2, 96, 256, 4, False),
    "qwen3moe_small": (2, 64, 4, 2, 32, 256, 4, True),
    # bench/README.md, "Per-expert sums": 8 experts of 512 x 512, 16.3M elements (196 MB of state).
    "mixtral_bench": (2, 512, 8, 2, 512, 1024, 8, False),
}


def moe_params(arch):
    """(name, shape) of a transformers 5 Mixtral / Qwen3-MoE model's named_parameters(), in order."""
    L, h, heads, kv, f, v, E, qk_norm = MOE_ARCHS[arch]
    hd = h // heads
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(L):
        a = f"model.layers.{i}."
        out += [(a + "self_attn.q_proj.weight", (h, h)), (a + "self_attn.k_proj.weight", (hd * kv, h)),
                (a + "self_attn.v_proj.weight", (hd * kv, h)), (a + "self_attn.o_proj.weight", (h, h))]
        if qk_norm:
            out += [(a + "self_attn.q_norm.weight", (hd,)), (a + "self_attn.k_norm.weight", (hd,))]
        out += [(a + "mlp.gate.weight", (E, h)), (a + "mlp.experts.gate_up_proj", (E, 2 * f, h)),
                (a + "mlp.experts.down_proj", (E, h, f)),
                (a + "input_layernorm.weight", (h,)), (a + "post_attention_layernorm.weight", (h,))]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def llama_params(arch):
    """(name, shape) of a Hugging Face Llama state_dict, in its order."""
    if arch in MOE_ARCHS:
        return moe_params(arch)
    L, h, heads, kv, f, v = ARCHS[arch]
    kvd = h // heads * kv
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(L):
        a = f"model.layers.{i}."
        out += [(a + "self_attn.q_proj.weight", (h, h)), (a + "self_attn.k_proj.weight", (kvd, h)),
                (a + "self_attn.v_proj.weight", (kvd, h)), (a + "self_attn.o_proj.weight", (h, h)),
                (a + "mlp.gate_proj.weight", (f, h)), (a + "mlp.up_proj.weight", (f, h)),
                (a + "mlp.down_proj.weight", (h, f)),
                (a + "input_layernorm.weight", (h,)), (a + "post_attention_layernorm.weight", (h,))]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def module_prefixes(names):
    """module._metadata keys for these parameter names: '' and every module prefix, pre-order."""
    seen = {"": None}
    for nm in names:
        parts = nm.split(".")[:-1]
        for k in range(1, len(parts) + 1):
            seen.setdefault(".".join(parts[:k]), None)
    return list(seen)


class Model:
    def __init__(self, args):
        if args.arch != "random":
            self._init_llama(args)
            return
        rng = np.random.default_rng(args.seed)
        if args.sizes:
            shapes = _parse_sizes(args.sizes)
        else:
            a, b = args.numel_min, args.numel_max
            shapes = [(_shape_2d(rng, a, b) if p % 2 == 0 else (int(rng.integers(a, b + 1)),))
                      for p in range(args.params)]
        n = len(shapes)
        if n < args.groups:
            raise SystemExit(f"need at least as many params ({n}) as groups ({args.groups})")
        K = args.frozen
        fa, fb = (args.numel_min, args.numel_max)
        if args.sizes:
            fa = 1
            fb = max(1, max(int(np.prod(s)) for s in shapes))
        fshapes = [((int(rng.integers(fa, fb + 1)),) if j % 2 == 0 else _shape_2d(rng, fa, fb))
                   for j in range(K)]
        self.frozen = [Param(f"frozen.{j}.weight", s, j, None, False) for j, s in enumerate(fshapes)]
        self.params = [Param(f"layers.{p // 2}.{'weight' if p % 2 == 0 else 'bias'}", s, K + p,
                             p % args.groups, True) for p, s in enumerate(shapes)]
        self.buffer = Param("running_mean", (30,), K + n, None, False)
        self.G = args.groups
        self.groups = [[p for p in self.params if p.group == g] for g in range(self.G)]
        self.seed = args.seed
        meta = [("", {"version": 1})]
        if K:
            meta.append(("frozen", {"version": 1}))
            meta += [(f"frozen.{j}", {"version": 1}) for j in range(K)]
        meta.append(("layers", {"version": 1}))
        meta += [(f"layers.{i}", {"version": 1}) for i in range((n + 1) // 2)]
        self.metadata = meta

    def _init_llama(self, args):
        """--arch: Llama names and shapes; 2-D weights in group 0 (weight decay), the RMSNorm
        weights in group 1 (no decay), as DeepSpeed users usually split them. No buffers (the
        rotary inv_freq is not persistent) and no frozen params."""
        named = llama_params(args.arch)
        self.frozen = []
        self.params = [Param(nm, sh, p, 0 if len(sh) >= 2 else 1, True)
                       for p, (nm, sh) in enumerate(named)]
        self.buffer = None
        self.G = 2
        self.groups = [[p for p in self.params if p.group == g] for g in range(self.G)]
        self.seed = args.seed
        self.metadata = [(k, {"version": 1}) for k in module_prefixes(nm for nm, _ in named)]

    def key(self, p, state=ST_FP32):
        return value_key(self.seed, p.ds_id, state)

    def full(self, p, state=ST_FP32):
        return gen_values(self.key(p, state), 0, p.numel, state).reshape(p.shape)

    def weight_decay(self, g):
        return round(0.01 * (self.G - 1 - g), 10)

    def param_group(self, g, params):
        return {
            "weight_decay": self.weight_decay(g),
            "lr": LR,
            "betas": BETAS,
            "eps": 1e-08,
            "amsgrad": False,
            "maximize": False,
            "foreach": None,
            "capturable": False,
            "differentiable": False,
            "fused": None,
            "decoupled_weight_decay": True,
            "params": params,
        }


# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------

class Writer:
    def __init__(self, args, model):
        self.args = args
        self.m = model
        self.W = args.dp
        self.tagdir = os.path.join(args.out_dir, args.tag)
        os.makedirs(self.tagdir, exist_ok=True)
        self.alloc = Alloc(self.tagdir, args.mmap_min_mib << 20)
        self.files = 0
        self.bytes = 0
        self.disk = 0  # bytes allocated on disk (st_blocks), differs from self.bytes with --sparse
        self.steps = args.steps
        self.sparse = args.sparse
        self.hole_min = args.hole_min_bytes
        self.checked_zip = False
        self.bf16 = args.module_dtype == "bf16"
        zo = {"stage": args.stage}
        if args.stage == 3:
            zo["stage3_param_persistence_threshold"] = 0
            if args.sub_group_size_given:
                zo["sub_group_size"] = args.sub_group_size
        self.ds_config = {
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": 1.0,
            "steps_per_print": 1000000,
            "wall_clock_breakdown": False,
            "zero_allow_untested_optimizer": True,
            "scheduler": {"type": "WarmupLR",
                          "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01,
                                     "warmup_num_steps": 10, "warmup_type": "linear"}},
            "zero_optimization": zo,
        }
        if self.bf16:
            self.ds_config["bf16"] = {"enabled": True}

    def hole(self, nbytes):
        """True when a buffer of nbytes is left unwritten (a hole, zeros) and so need not be
        filled: --sparse writes tensor records of --hole-min-bytes or more as holes."""
        return self.sparse and nbytes >= self.hole_min

    def module_tensor(self, n):
        """A flat module buffer of n elements in the module dtype; filled unless it is a hole."""
        if self.hole(n * (2 if self.bf16 else 4)):
            if self.bf16:
                return T(self.alloc.zeros(n, np.int16)).view(torch.bfloat16), None
            return T(self.alloc.zeros(n)), None
        flat = self.alloc.zeros(n)
        return (T(flat).to(torch.bfloat16) if self.bf16 else T(flat)), flat

    def _account(self, path):
        st = os.stat(path)
        self.files += 1
        self.bytes += st.st_size
        self.disk += st.st_blocks * 512

    def save_sparse(self, records, path, obj):
        write_zip(path, records, self.hole_min)
        if not self.checked_zip:
            # Once: the same records written in full must equal torch.save byte for byte (only
            # when they are small enough to write twice).
            self.checked_zip = True
            total = sum(n for _, _, n in records)
            if total <= 64 << 20:
                refdir = tempfile.mkdtemp(prefix=".gen_ckpt_check_", dir=self.tagdir)
                ref, mine = os.path.join(refdir, os.path.basename(path)), os.path.join(refdir, "x")
                os.mkdir(mine)
                mine = os.path.join(mine, os.path.basename(path))
                torch.save(obj, ref)
                write_zip(mine, records, float("inf"))
                same = filecmp.cmp(ref, mine, shallow=False)
                os.unlink(ref)
                os.unlink(mine)
                os.rmdir(os.path.dirname(mine))
                os.rmdir(refdir)
                if not same:
                    raise SystemExit("gen_ckpt: the sparse zip writer's layout differs from torch.save")

    def save(self, obj, name):
        path = os.path.join(self.tagdir, name)
        if self.sparse:
            self.save_sparse(capture_records(obj), path, obj)
        else:
            torch.save(obj, path)
        self._account(path)
        return path

    def save_replay(self, obj, name, st):
        """torch.save(obj) for a series of files whose pickle is identical and whose tensors were
        refilled in place: the first save records torch's write_record calls (pickle bytes and
        storage pointers) and later saves replay them through the same zip writer torch.save uses,
        so each file is byte-identical to a torch.save of it (the archive folder still follows the
        file name). The first replay is checked against a real torch.save; on any problem, plain
        torch.save is used."""
        path = os.path.join(self.tagdir, name)
        if self.sparse:
            # The pickle is the same for every rank; small records are read from the refilled
            # buffers through their captured data pointers.
            if st.get("records") is None:
                st["records"] = capture_records(obj)
            self.save_sparse(st["records"], path, obj)
            self._account(path)
            return path
        recs = st.get("records")
        if recs is None or not self.args.fast:
            st["records"] = _save_capture(obj, path) if self.args.fast else None
            if st["records"] is None:
                torch.save(obj, path)
        else:
            _replay(recs, path)
            if not st.get("checked"):
                st["checked"] = True
                refdir = tempfile.mkdtemp(prefix=".gen_ckpt_check_", dir=self.tagdir)
                ref = os.path.join(refdir, name)  # same base name: torch names the archive after it
                torch.save(obj, ref)
                same = filecmp.cmp(ref, path, shallow=False)
                os.replace(ref, path)
                os.rmdir(refdir)
                if not same:
                    print("gen_ckpt: replayed save differs from torch.save; using torch.save",
                          file=sys.stderr)
                    st["records"] = None
                    self.args.fast = False
        self._account(path)
        return path

    def step_tensor(self):
        return torch.tensor(float(self.steps), dtype=torch.float32)

    def buffer_tensor(self):
        return T(self.m.full(self.m.buffer).copy())

    def model_state(self, module, param_shapes, frozen_shapes, frozen_frags):
        module = OrderedDict(module)
        module._metadata = OrderedDict((k, dict(v)) for k, v in self.m.metadata)
        steps = self.steps
        return {
            "module": module,
            "buffer_names": [self.m.buffer.name] if self.m.buffer else [],
            "optimizer": None,
            "param_shapes": param_shapes,
            "frozen_param_shapes": frozen_shapes,
            "shared_params": {},
            "frozen_param_fragments": frozen_frags,
            "lr_scheduler": {"last_batch_iteration": steps - 1},
            "data_sampler": None,
            "random_ltd": None,
            "sparse_tensor_module_names": set(),
            "skipped_steps": 0,
            "global_steps": steps,
            "global_samples": steps * 4 * self.W,
            "dp_world_size": self.W,
            "mp_world_size": 1,
            "checkpoint_parallel_dimensions": {"pp_degree": 1, "tp_degree": 1},
            "ds_config": self.ds_config,
            "ds_version": DS_VERSION,
            "universal_checkpoint_info": {"universal_checkpoint_version": 0.4},
            "iteration": steps,
        }

    def optim_file(self, osd):
        return {"optimizer_state_dict": osd, "ds_config": self.ds_config, "ds_version": DS_VERSION}

    def write_latest(self):
        with open(os.path.join(self.args.out_dir, "latest"), "w") as f:
            f.write(self.args.tag)
        self.files += 1
        self.bytes += len(self.args.tag.encode())
        self.disk += os.stat(os.path.join(self.args.out_dir, "latest")).st_blocks * 512


class Stage12Writer(Writer):
    def master(self, t):
        """--dtype bf16: the masters and moments stored in bfloat16 (rounded to nearest even)."""
        return t.to(torch.bfloat16) if self.args.dtype == "bf16" else t

    def run(self):
        m, W = self.m, self.W
        A = 2 * W
        self.layout = []
        for g, params in enumerate(m.groups):
            n = np.array([p.numel for p in params], dtype=np.int64)
            off = np.concatenate(([0], np.cumsum(n)[:-1])).astype(np.int64)
            N = int(n.sum())
            Tg = -(-N // A) * A
            self.layout.append((params, n, off, N, Tg, Tg // W))
        self.write_model()
        for r in range(W):
            self.write_optim(r)

    def write_model(self):
        m = self.m
        module = [(m.buffer.name, self.buffer_tensor())] if m.buffer else []
        frozen = OrderedDict()
        for p in m.frozen:
            t = T(m.full(p).copy())
            module.append((p.name, t))
            frozen[p.name] = t
        views = {}
        for g, (params, n, off, N, Tg, P) in enumerate(self.layout):
            ft, flat = self.module_tensor(Tg)
            if flat is not None:
                keys = [np.array([m.key(p) for p in params], dtype=np.uint32)]
                fill([flat], keys, np.zeros(len(params)), n, off, [ST_FP32])
                if self.bf16:
                    ft.copy_(T(flat))
            for p, o in zip(params, off.tolist()):
                views[p.name] = ft[o:o + p.numel].view(p.shape)
        module += [(p.name, views[p.name]) for p in m.params]
        param_shapes = [OrderedDict((p.name, torch.Size(p.shape)) for p in L[0]) for L in self.layout]
        if self.args.stage >= 2:
            fshapes = OrderedDict((p.name, torch.Size(p.shape)) for p in m.frozen)
            ffrags = frozen
        else:
            fshapes = ffrags = None
        self.save(self.model_state(module, param_shapes, fshapes, ffrags), "mp_rank_00_model_states.pt")

    def write_optim(self, r):
        m, W = self.m, self.W
        state, pgroups, fp32_groups, paddings, mappings = {}, [], [], [], []
        for g, (params, n, off, N, Tg, P) in enumerate(self.layout):
            lo, hi = r * P, (r + 1) * P
            bufs = [self.alloc.zeros(P) for _ in STATES]
            # params overlapping [lo, hi): off[k] < hi and off[k] + n[k] > lo
            k0 = int(np.searchsorted(off + n, lo, side="right"))
            k1 = int(np.searchsorted(off, hi, side="left"))
            idx = np.arange(k0, k1)
            if len(idx):
                s = np.maximum(off[idx], lo)
                e = np.minimum(off[idx] + n[idx], hi)
                sel = e > s
                idx, s, e = idx[sel], s[sel], e[sel]
            else:
                s = e = idx
            if not self.hole(P * 4):
                keys = [np.array([m.key(params[k], st) for k in idx.tolist()], dtype=np.uint32)
                        for st in range(3)]
                fill(bufs, keys, s - off[idx], e - s, s - lo, [ST_FP32, ST_AVG, ST_AVGSQ])
            L = max(0, min(P, N - lo))
            fp32 = self.master(T(bufs[0])[:L]).detach()
            fp32.requires_grad_(True)
            fp32_groups.append(fp32)
            paddings.append(P - L)
            state[g] = {"step": self.step_tensor(), "exp_avg": self.master(T(bufs[1])),
                        "exp_avg_sq": self.master(T(bufs[2]))}
            pgroups.append(m.param_group(g, [g]))
            mappings.append(OrderedDict(
                (params[k].name, fragment_address(numel=int(b - a), start=int(a - lo)))
                for k, a, b in zip(idx.tolist(), s.tolist(), e.tolist())))
        osd = {
            "loss_scaler": LossScaler(1.0),
            "dynamic_loss_scale": False,
            "overflow": False,
            "clip_grad": 1.0,
            "base_optimizer_state": {"state": state, "param_groups": pgroups},
            "single_partition_of_fp32_groups": fp32_groups,
            "zero_stage": ZeroStageEnum(self.args.stage),
            "group_paddings": paddings,
            "partition_count": [W] * m.G,
            "ds_version": DS_VERSION,
            "param_slice_mappings": mappings,
        }
        self.save(self.optim_file(osd), f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt")


class Stage3Writer(Writer):
    """Every rank's model-state file and every rank's optimizer file have the same pickle (sizes
    are equal on all ranks, only tensor contents differ), so one object per kind is built, its
    buffers are refilled in place for each rank and the pickle is replayed (see save_replay)."""

    def run(self):
        m, W = self.m, self.W
        S = self.args.sub_group_size
        self.subgroups = []  # (group, params, n, p, q)
        self.group_subs = []
        for g, params in enumerate(m.groups):
            ids = []
            cur, acc = [], 0
            for i, prm in enumerate(params):
                cur.append(prm)
                acc += -(-prm.numel // W)
                if acc >= S or i == len(params) - 1:
                    n = np.array([x.numel for x in cur], dtype=np.int64)
                    p = -(-n // W)
                    q = np.concatenate(([0], np.cumsum(p)[:-1])).astype(np.int64)
                    ids.append(len(self.subgroups))
                    self.subgroups.append((g, cur, n, p, q))
                    cur, acc = [], 0
            self.group_subs.append(ids)
        model_obj, frags = self.build_model()
        optim_obj, bufs = self.build_optim()
        mstate, ostate = {}, {}
        for r in range(W):
            self.fill_frozen(r, frags)
            self.save_replay(model_obj, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt", mstate)
            self.fill_optim(r, bufs)
            self.save_replay(optim_obj, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt", ostate)

    def build_model(self):
        m, W = self.m, self.W
        module = [(m.buffer.name, self.buffer_tensor())] if m.buffer else []
        frags = OrderedDict()
        mdt = torch.bfloat16 if self.bf16 else torch.float32
        for p in m.frozen:
            module.append((p.name, torch.empty(0, dtype=mdt)))
            frags[p.name] = np.zeros(-(-p.numel // W), dtype=np.float32)
        module += [(p.name, torch.empty(0, dtype=mdt)) for p in m.params]
        param_shapes = [OrderedDict((p.name, torch.Size(p.shape)) for p in sg[1]) for sg in self.subgroups]
        fshapes = OrderedDict((p.name, torch.Size(p.shape)) for p in m.frozen)
        ffrags = OrderedDict((k, T(v)) for k, v in frags.items())
        return self.model_state(module, param_shapes, fshapes, ffrags), frags

    def fill_frozen(self, r, frags):
        m = self.m
        for p in m.frozen:
            buf = frags[p.name]
            pk = len(buf)
            buf[:] = 0
            v = max(0, min(pk, p.numel - r * pk))
            if v:
                buf[:v] = gen_values(m.key(p), r * pk, v, ST_FP32)

    def build_optim(self):
        m = self.m
        state, flats, bufs = {}, [], []
        for sid, (g, params, n, p, q) in enumerate(self.subgroups):
            size = int(p.sum())
            b = [self.alloc.zeros(size) for _ in STATES]
            bufs.append(b)
            fp32 = T(b[0])
            fp32.requires_grad_(True)
            flats.append(_DsIdTensor(fp32, f"{params[0].ds_id}_{params[-1].ds_id}"))
            state[sid] = {"step": self.step_tensor(), "exp_avg": T(b[1]), "exp_avg_sq": T(b[2])}
        pgroups = [m.param_group(g, list(ids)) for g, ids in enumerate(self.group_subs)]
        osd = {
            "zero_stage": ZeroStageEnum.weights,
            "loss_scaler": LossScaler(1.0),
            "dynamic_loss_scale": False,
            "overflow": False,
            "partition_count": self.W,
            "optimizer_state_dict": {"state": state, "param_groups": pgroups},
            "fp32_flat_groups": flats if not self.args.plain_flat_groups else [f.t for f in flats],
        }
        self.keys3 = [[np.array([m.key(x, st) for x in sg[1]], dtype=np.uint32) for st in range(3)]
                      for sg in self.subgroups]
        return self.optim_file(osd), bufs

    def fill_optim(self, r, bufs):
        for sid, (g, params, n, p, q) in enumerate(self.subgroups):
            b = bufs[sid]
            if self.hole(len(b[0]) * 4):
                continue  # never written: zeros in the file
            i0 = r * p
            v = np.clip(n - i0, 0, p)
            if r:
                for x in b:
                    x[:] = 0
            fill(b, self.keys3[sid], i0, v, q, [ST_FP32, ST_AVG, ST_AVGSQ])


def write_expected(args, model, writer):
    d = args.expected
    os.makedirs(d, exist_ok=True)
    entries = []
    for p in model.params:
        pd = os.path.join(d, p.name)
        os.makedirs(pd, exist_ok=True)
        for st, nm in enumerate(STATES):
            full = model.full(p, st)
            if args.dtype == "bf16":  # what the shards hold, widened back to float32 (exact)
                full = T(full.copy()).to(torch.bfloat16).float().numpy()
            np.save(os.path.join(pd, nm + ".npy"), full)
        entries.append({"name": p.name, "shape": list(p.shape), "group": p.group, "ds_id": p.ds_id})
    frozen = []
    for p in model.frozen + ([model.buffer] if model.buffer else []):
        pd = os.path.join(d, p.name)
        os.makedirs(pd, exist_ok=True)
        np.save(os.path.join(pd, "fp32.npy"), model.full(p))
    frozen = [{"name": p.name, "shape": list(p.shape), "ds_id": p.ds_id} for p in model.frozen]
    manifest = {
        "stage": args.stage,
        "dp": args.dp,
        "seed": args.seed,
        "tag": args.tag,
        "step": args.steps,
        "params": entries,
        "frozen": frozen,
        "buffers": [{"name": b.name, "shape": list(b.shape)} for b in [model.buffer] if b],
        "param_groups": [{"weight_decay": model.weight_decay(g),
                          "params": [p.name for p in model.groups[g]]} for g in range(model.G)],
    }
    if args.stage == 3:
        manifest["sub_groups"] = [[p.name for p in sg[1]] for sg in writer.subgroups]
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Generate a synthetic DeepSpeed ZeRO checkpoint (fp32).")
    ap.add_argument("out_dir", metavar="OUT_DIR", help="checkpoint folder (gets 'latest' and <tag>/)")
    ap.add_argument("--stage", type=int, choices=(1, 2, 3), required=True)
    ap.add_argument("--dp", type=int, required=True, help="data-parallel world size W")
    ap.add_argument("--params", type=int, default=12, help="number of trainable params (default 12)")
    ap.add_argument("--numel-min", type=int, default=1)
    ap.add_argument("--numel-max", type=int, default=5000)
    ap.add_argument("--sizes", help="explicit trainable shapes, e.g. '37x12,30,30x30,7' (overrides "
                                    "--params/--numel-*)")
    ap.add_argument("--groups", type=int, default=2, help="param groups G; param i goes to group i%%G")
    ap.add_argument("--sub-group-size", type=int, default=None,
                    help="stage 3 sub_group_size (per-rank elements; default 1e9)")
    ap.add_argument("--frozen", type=int, default=0, help="number of frozen (requires_grad=False) params")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3, help="global_steps / optimizer step (default 3)")
    ap.add_argument("--tag", default=None, help="default global_step<steps>")
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"),
                    help="masters and optimizer states; bf16 (16-bit masters, a hostile case): stages 1 and 2")
    ap.add_argument("--expected", metavar="DIR", help="also write ground-truth .npy files + manifest.json")
    ap.add_argument("--plain-flat-groups", action="store_true",
                    help="stage 3: pickle fp32_flat_groups as plain tensors (torch<2.0 style, no ds_id)")
    ap.add_argument("--no-fast", dest="fast", action="store_false",
                    help="stage 3: torch.save every file instead of replaying the shared pickle")
    ap.add_argument("--mmap-min-mib", type=int, default=256,
                    help="buffers of at least this size are file-backed (0 = never)")
    ap.add_argument("--arch", default="random", choices=("random",) + tuple(ARCHS) + tuple(MOE_ARCHS),
                    help="parameter names and shapes: random 'layers.N' (default, see --params) or "
                         "a Llama-style model (small: 2 layers, llama70b: 80 layers, 70.55e9 params)")
    ap.add_argument("--module-dtype", default=None, choices=("fp32", "bf16"),
                    help="dtype of the model-state module tensors (default fp32; bf16 for --arch "
                         "small/llama70b). bf16 also sets ds_config bf16.enabled")
    ap.add_argument("--sparse", action="store_true",
                    help="write tensor records as holes (our own zip writer, CRC 0): stat sizes are "
                         "real, disk usage is the pickles only")
    ap.add_argument("--hole-min-bytes", type=int, default=65536,
                    help="--sparse: tensor records of at least this size are holes; smaller ones "
                         "(step counts, small norms) are written with their values (default 65536)")
    args = ap.parse_args(argv)
    if args.module_dtype is None:
        args.module_dtype = "fp32" if args.arch == "random" else "bf16"
    if args.dp < 1 or args.groups < 1 or args.frozen < 0 or args.steps < 1:
        ap.error("--dp, --groups, --steps must be >= 1 and --frozen >= 0")
    if not args.sizes and not (0 <= args.numel_min <= args.numel_max):
        ap.error("need 0 <= --numel-min <= --numel-max")
    args.sub_group_size_given = args.sub_group_size is not None
    if args.sub_group_size is None:
        args.sub_group_size = 1000000000
    if args.tag is None:
        args.tag = f"global_step{args.steps}"
    if args.dtype == "bf16" and args.stage == 3:
        ap.error("--dtype bf16 (16-bit masters) is written for stages 1 and 2 only")

    t0 = time.time()
    model = Model(args)
    if max((p.numel for p in model.params + model.frozen), default=0) >= 1 << 32:
        ap.error("params with >= 2**32 elements are not supported")
    os.makedirs(args.out_dir, exist_ok=True)
    writer = (Stage3Writer if args.stage == 3 else Stage12Writer)(args, model)
    writer.run()
    writer.write_latest()
    if args.expected:
        write_expected(args, model, writer)
    dt = time.time() - t0
    print(f"gen_ckpt: stage {args.stage} dp {args.dp}: {len(model.params)} params, "
          f"{writer.files} files, {writer.bytes} bytes ({writer.bytes / 2**30:.3f} GiB), "
          f"{dt:.2f} s -> {os.path.join(args.out_dir, args.tag)}"
          + (f"; {writer.disk / 2**20:.1f} MiB on disk" if args.sparse else ""))


if __name__ == "__main__":
    main()
