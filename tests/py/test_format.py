"""The .pt format layer against Python torch (issue 2): the C++ reader sees what torch sees in
every fixture file, and the lazy writer produces files torch.load accepts, byte-identical to
torch.save's for simple state dicts."""
import collections
import glob
import json
import os
import subprocess

import pytest
import torch

from conftest import FIXTURES, PT_RESAVE, ZEROMOUNT
from pt_manifest import manifest

ALL_PT = sorted(glob.glob(os.path.join(FIXTURES, "*", "**", "*.pt"), recursive=True)
                + glob.glob(os.path.join(FIXTURES, "*", "zero_to_fp32", "*.bin")))


def test_fixture_list_is_complete():
    assert len(ALL_PT) > 100


@pytest.mark.parametrize("path", ALL_PT, ids=lambda p: os.path.relpath(p, FIXTURES))
def test_reader_matches_torch(path):
    ours = json.loads(subprocess.run([ZEROMOUNT, "dump", "--json", path], check=True,
                                     capture_output=True, text=True).stdout)
    assert ours == manifest(path)


def saved(tmp_path, obj, name="x.pt"):
    p = tmp_path / "torch" / name
    p.parent.mkdir(exist_ok=True)
    torch.save(obj, p)
    return p


def resave(src, tmp_path, *flags, name="x.pt"):
    out = tmp_path / "ours" / name
    out.parent.mkdir(exist_ok=True)
    subprocess.run([PT_RESAVE, str(src), str(out), *flags], check=True)
    return out


SIMPLE = {
    "one tensor": lambda: {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)},
    "state dict": lambda: collections.OrderedDict(
        (f"layer{i}.weight", torch.randn(3, i + 1)) for i in range(12)),  # 12 keys: 1.13 sorts them as strings
    "dtypes": lambda: {"f16": torch.ones(3, dtype=torch.float16), "bf16": torch.ones(2, dtype=torch.bfloat16),
                       "i64": torch.arange(4), "b": torch.tensor([True, False]), "scalar": torch.tensor(3.0),
                       "empty": torch.zeros(0)},
    "universal param": lambda: {"cat_dim": 0, "param": torch.randn(37, 12)},
    "nested": lambda: {"a": [1, 2, (3, 4, 5, 6)], "b": {"c": torch.ones(2), "d": None, "e": True, "f": 2**40}},
}


@pytest.mark.parametrize("case", SIMPLE)
def test_writer_is_byte_identical_to_torch_save(tmp_path, case):
    torch.manual_seed(0)
    src = saved(tmp_path, SIMPLE[case]())
    ours = resave(src, tmp_path, "--torch113", "--crc")  # torch.save computes real CRCs
    assert ours.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("case", SIMPLE)
def test_written_files_load(tmp_path, case, weights_only):
    torch.manual_seed(0)
    obj = SIMPLE[case]()
    ours = resave(saved(tmp_path, obj), tmp_path)  # default layout: with 'byteorder', keys in order
    back = torch.load(ours, weights_only=weights_only)
    assert_same(back, obj)


def assert_same(a, b):
    assert type(a) == type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def test_real_crc_passes_zipfile(tmp_path):
    import zipfile
    ours = resave(saved(tmp_path, SIMPLE["state dict"]()), tmp_path, "--crc")
    assert zipfile.ZipFile(ours).testzip() is None
    default = resave(saved(tmp_path, SIMPLE["state dict"](), name="y.pt"), tmp_path, name="y.pt")
    torch.load(default, weights_only=True)  # CRC 0: torch never checks


def test_resaved_deepspeed_files_keep_their_objects(tmp_path):
    """A subtree copied from a source pickle (loss scaler, enum, fragment_address) re-emits."""
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2/checkpoint/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt")
    ours = resave(src, tmp_path, name="zero_pp_rank_0_mp_rank_00_optim_states.pt")
    a = manifest(str(ours))
    b = manifest(src)
    a.pop("prefix"), b.pop("prefix")
    assert a == b
