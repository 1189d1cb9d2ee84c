"""`zeromount verify` and `zeromount diff` (issue 42) through the CLI: exit codes, JSON, every
fixture against its own made-up views written by `zeromount export` (0 differences), and diff's
norms against torch's, an independent reader."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch

from conftest import DP_FIXTURES, FIXTURE_NAMES, FIXTURES, ZEROMOUNT

TAG = "global_step3"


def zm(*args):
    return subprocess.run([ZEROMOUNT, *map(str, args)], capture_output=True, text=True, timeout=300)


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every DP fixture's made-up folders (all kinds) and one faked layout, exported once."""
    out = {}
    for name in DP_FIXTURES:
        root = tmp_path_factory.mktemp(name)
        src = os.path.join(FIXTURES, name, "checkpoint")
        r = zm("export", src, root / "all", "--view", "all")
        assert r.returncode == 0, r.stderr
        # The layout in the source's precision: a precision change is a difference diff must show.
        prec = "bf16" if "bf16" in name else "fp16" if "fp16" in name else "fp32"
        r = zm("export", src, root / "layout", "--layout", f"zero1-dp3-{prec}")
        assert r.returncode == 0, r.stderr
        out[name] = root
    return out


@pytest.mark.parametrize("name", DP_FIXTURES)
def test_verify_fixture_passes(name):
    r = zm("verify", os.path.join(FIXTURES, name, "checkpoint"), "--json")
    rep = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout
    assert rep["verdict"] == "pass" and {c["name"] for c in rep["checks"]} >= {"zip-crc", "finite", "step-agrees"}


@pytest.mark.parametrize("name", DP_FIXTURES)
def test_diff_against_own_views_is_zero(exported, name):
    src = os.path.join(FIXTURES, name, "checkpoint")
    made = exported[name] / "all"
    views = {
        "universal": made / f"{TAG}_universal",
        "fp32 weights": made / f"{TAG}_fp32",
        "dcp": made / f"{TAG}_dcp",
        "layout zero1-dp3": exported[name] / "layout",
    }
    for what, path in views.items():
        if not path.exists():
            continue
        r = zm("diff", src, path, "--json")
        rep = json.loads(r.stdout)
        bad = [row for row in rep["rows"] if row["status"] not in ("equal", "close")]
        assert r.returncode == 0 and not bad, (what, r.stdout, r.stderr)
        assert len(rep["rows"]) >= 9, (what, rep)
        # The made-up folder also verifies (its CRCs are 0 without -o crc: a note, not a failure).
        v = zm("verify", path)
        assert v.returncode == 0, (what, v.stdout)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_diff_norms_are_torchs(name):
    """diff's norm of each universal fp32 tensor is torch's (in float64)."""
    src = os.path.join(FIXTURES, name, "checkpoint")
    uni = os.path.join(FIXTURES, name, "ds_to_universal")
    rep = json.loads(zm("diff", src, uni, "--json").stdout)
    assert rep["differences"] == 0
    rows = {(r["param"], r["state"]): r for r in rep["rows"]}
    zero = os.path.join(uni, f"{TAG}_universal", "zero")
    for p in os.listdir(zero):
        if not os.path.isdir(os.path.join(zero, p)):
            continue
        t = torch.load(os.path.join(zero, p, "fp32.pt"), weights_only=True)
        t = t["param"] if isinstance(t, dict) else t
        want = float(t.double().norm())
        assert rows[(p, "weight")]["norm_b"] == pytest.approx(want, rel=1e-3)


def test_verify_exit_codes_and_json(tmp_path):
    good = {f"layers.{k}.w": np.full((4, 4), 0.1, np.float32) for k in range(4)}
    write_safetensors(tmp_path / "model.safetensors", good)
    assert zm("verify", tmp_path).returncode == 0
    bad = dict(good)
    bad["layers.1.w"] = good["layers.1.w"].copy()
    bad["layers.1.w"][2, 3] = np.nan
    write_safetensors(tmp_path / "model.safetensors", bad)
    r = zm("verify", tmp_path, "--json", "--html", tmp_path / "v.html")
    rep = json.loads(r.stdout)
    assert r.returncode == 2 and rep["verdict"] == "fail"
    nan = [f for f in rep["findings"] if f["check"] == "finite"]
    assert nan and "[2, 3]" in nan[0]["message"], rep
    assert "finite" in (tmp_path / "v.html").read_text()
    assert zm("verify", tmp_path / "nothing").returncode == 2


def test_diff_says_each_prefix_match(tmp_path):
    a = {"fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3)}
    b = {"_orig_mod.model.fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3)}
    write_safetensors(tmp_path / "a.safetensors", a)
    write_safetensors(tmp_path / "b.safetensors", b)
    r = zm("diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert r.returncode == 0, r.stdout
    assert "match:" in r.stdout and "'_orig_mod.'" in r.stdout and "'model.'" in r.stdout
    b["_orig_mod.model.fc.weight"][1, 1] += 1e-3
    write_safetensors(tmp_path / "b.safetensors", b)
    assert zm("diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors").returncode == 1
    assert zm("diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors", "--atol", "1e-2").returncode == 0


def test_source_is_never_written(tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), src)
    before = {p: os.stat(os.path.join(d, p)).st_mtime_ns for d, _, fs in os.walk(src) for p in fs}
    zm("verify", src, "--html", tmp_path / "page.html")
    after = {p: os.stat(os.path.join(d, p)).st_mtime_ns for d, _, fs in os.walk(src) for p in fs}
    assert before == after
