"""`zeromount verify` and `diff` of the plain Trainer's folder (optimizer.pt beside model.safetensors),
param groups' hyper-parameters across formats, and ranks agreeing (issue 42). The files compared
are DeepSpeed's and torch's own (torch.save, a real torch AdamW run), or crafted from them here."""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import zipfile
import zlib

import numpy as np
import pytest
import torch

from conftest import DP_FIXTURES, FIXTURES, ZEROMOUNT, mount

DCP_FIXTURES = ["fsdp2_ws2_fp32", "fsdp2_ws2_bf16mixed", "fsdp2_ws3_fp32", "torchtitan_ws2_fp32", "hf_fsdp_ws2_fp32"]


def zm(*args):
    return subprocess.run([ZEROMOUNT, *map(str, args)], capture_output=True, text=True, timeout=300)


def diff(a, b, *extra):
    r = zm("diff", a, b, "--json", *extra)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def bad_rows(rep):
    return [row for row in rep["rows"] if row["status"] not in ("equal", "close")]


def verify(path):
    r = zm("verify", path, "--json")
    return r.returncode, json.loads(r.stdout)


def dcp_source(name):
    return glob.glob(os.path.join(FIXTURES, "dcp", name, "checkpoint", "*"))[0]


def torch_view(src, out):
    r = zm("export", src, out, "--layout", "torch")
    assert r.returncode == 0, r.stderr
    return out


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name, t in tensors.items():
        b = t.detach().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


@pytest.mark.parametrize("name", DP_FIXTURES + [f"dcp/{n}" for n in DCP_FIXTURES])
def test_diff_against_own_torch_layout_is_zero(tmp_path, name):
    """A source against its layouts/torch export, and against torch's own re-save of that
    optimizer.pt: 0 differences, with moments, step and every group's hyper-parameters compared."""
    src = dcp_source(name[4:]) if name.startswith("dcp/") else os.path.join(FIXTURES, name, "checkpoint")
    view = torch_view(src, tmp_path / "torch")
    resaved = tmp_path / "resaved"
    shutil.copytree(view, resaved)
    torch.save(torch.load(view / "optimizer.pt"), resaved / "optimizer.pt")
    for b in (view, resaved):
        code, rep = diff(src, b)
        assert code == 0 and not bad_rows(rep), (b, bad_rows(rep), rep["notes"])
        states = {row["state"] for row in rep["rows"]}
        assert {"exp_avg", "exp_avg_sq", "lr", "eps", "weight_decay"} <= states, states
        assert any("named by the other input's module order" in m for m in rep["matches"]), rep["matches"]
        assert any("param group 1 ~ B param group 1" in m for m in rep["matches"]), rep["matches"]
    code, rep = verify(resaved)
    assert code == 0, rep
    checks = {c["name"]: c["subjects"] for c in rep["checks"]}
    assert checks["torch-ids"] == 1 and checks["moments-not-reset"] >= 18, checks


def test_diff_through_the_mount(tmp_path):
    src = os.path.join(FIXTURES, "z3_ws2_bf16_pg2", "checkpoint")
    with mount(src) as m:
        for a, b in ((src, os.path.join(m, "layouts", "torch")), (os.path.join(m, "global_step3"), src)):
            code, rep = diff(a, b)
            assert code == 0 and not bad_rows(rep) and len(rep["rows"]) >= 58, (a, b, bad_rows(rep))


@pytest.fixture
def torch_run(tmp_path):
    """A plain torch run's checkpoint folder: 3 AdamW steps, two groups (no decay on biases and
    norms, as the Trainer makes them), optimizer.pt by torch.save, weights by name."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if p.dim() > 1], "weight_decay": 0.1},
        {"params": [p for n, p in named if p.dim() <= 1], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95))
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 6)).pow(2).sum().backward()
        opt.step()
    out = tmp_path / "checkpoint-3"
    out.mkdir()
    torch.save(opt.state_dict(), out / "optimizer.pt")
    write_safetensors(out / "model.safetensors", dict(named))
    return out


def test_torch_run_verifies(torch_run):
    code, rep = verify(torch_run)
    assert code == 0, rep
    checks = {c["name"]: c["subjects"] for c in rep["checks"]}
    assert checks["moments-not-reset"] == 12 and checks["exp_avg_sq-nonnegative"] == 6, checks
    assert any("'param <id>'" in n for n in rep["notes"]), rep["notes"]


def test_zeroed_moment_is_caught(torch_run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(torch_run, bad)
    sd = torch.load(bad / "optimizer.pt")
    sd["state"][2]["exp_avg"].zero_()
    torch.save(sd, bad / "optimizer.pt")
    code, rep = verify(bad)
    assert code == 1, rep
    warned = [f for f in rep["findings"] if f["check"] == "moments-not-reset"]
    assert [f["subject"] for f in warned] == ["param 2 exp_avg"], warned
    code, rep = diff(torch_run, bad)
    assert code == 1 and [(r["param"], r["state"]) for r in bad_rows(rep)] == [("param 2", "exp_avg")], rep


def test_changed_lr_is_a_difference(torch_run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(torch_run, bad)
    sd = torch.load(bad / "optimizer.pt")
    sd["param_groups"][1]["lr"] = 2e-3
    torch.save(sd, bad / "optimizer.pt")
    code, rep = diff(torch_run, bad)
    rows = bad_rows(rep)
    assert code == 1 and [r["state"] for r in rows] == ["lr"] and rows[0]["max_abs"] == pytest.approx(1e-3), rows


def test_unlisted_state_fails_torch_ids(torch_run):
    sd = torch.load(torch_run / "optimizer.pt")
    sd["param_groups"][1]["params"].pop()  # its state stays: load_state_dict would keep it unused
    torch.save(sd, torch_run / "optimizer.pt")
    code, rep = verify(torch_run)
    assert code == 2 and any(f["check"] == "torch-ids" for f in rep["findings"]), rep


def named_swapped(view, out, names):
    """The torch view's optimizer.pt with 'param_names' (torch >= 2.6's named groups) and its two
    groups in the other order, ids renumbered as torch's state_dict numbers them."""
    sd = torch.load(view / "optimizer.pt")
    flat = [i for g in sd["param_groups"] for i in g["params"]]
    groups, state, next_id = [], {}, 0
    for g in reversed(sd["param_groups"]):
        g = dict(g)
        ids = []
        for i in g["params"]:
            state[next_id] = sd["state"][i]
            ids.append(next_id)
            next_id += 1
        g["param_names"] = [names[flat.index(i)] for i in g["params"]]
        g["params"] = ids
        groups.append(g)
    out.mkdir()
    shutil.copy(view / "model.safetensors", out)
    torch.save({"state": state, "param_groups": groups}, out / "optimizer.pt")
    return out


def test_named_groups_match_by_their_parameters(tmp_path):
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    view = torch_view(src, tmp_path / "torch")
    # The module names in the run's param groups' order, as its training script recorded them.
    with open(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "meta", "train.json")) as f:
        order = [n for g in json.load(f)["param_group_names"] for n in g]
    named = named_swapped(view, tmp_path / "named", order)
    code, rep = diff(src, named)
    assert code == 0 and not bad_rows(rep), bad_rows(rep)
    assert "A param group 0 ~ B param group 1: the same parameters (groups are matched by the parameters they hold)" in (
        rep["matches"]
    )
    assert not any("module order" in m for m in rep["matches"])  # named by the file, not by order
    # Two names of different shapes swapped: the moments no longer fit their parameters.
    order[0], order[-1] = order[-1], order[0]
    wrong = named_swapped(view, tmp_path / "wrong", order)
    code, rep = diff(src, wrong)
    assert code == 1 and {r["status"] for r in bad_rows(rep)} >= {"shape"}, rep


def patch_record(path, name_end, edit):
    """Rewrites the bytes of the zip record whose name ends with `name_end` by `edit` (same
    length), and writes the record's new CRC-32 in its local header and central directory entry."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(name_end))
    raw = bytearray(open(path, "rb").read())
    local = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", raw, local + 26)
    start = local + 30 + name_len + extra_len
    body = edit(bytes(raw[start : start + info.compress_size]))
    assert len(body) == info.compress_size
    raw[start : start + len(body)] = body
    old_crc, new_crc = struct.pack("<I", info.CRC), struct.pack("<I", zlib.crc32(body))
    raw[local + 14 : local + 18] = new_crc
    at = raw.find(b"PK\x01\x02")
    while struct.unpack_from("<I", raw, at + 42)[0] != local:
        at = raw.find(b"PK\x01\x02", at + 4)
    assert raw[at + 16 : at + 20] == old_crc
    raw[at + 16 : at + 20] = new_crc
    open(path, "wb").write(bytes(raw))


def doubled_lr(pickle):
    """Every param group's 'lr' (a BINFLOAT after the key 'lr', BINUNICODE or SHORT_BINUNICODE)
    doubled."""
    out = bytearray(pickle)
    for key in re.finditer(rb"(?:X\x02\x00\x00\x00|\x8c\x02)lr", pickle):
        g = pickle.index(b"G", key.end())
        (lr,) = struct.unpack_from(">d", pickle, g + 1)
        out[g + 1 : g + 9] = struct.pack(">d", 2 * lr)
    return bytes(out)


def test_ranks_disagreeing_on_lr_fail(tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), src)
    rank1 = glob.glob(str(src / "global_step3" / "*rank_1*optim_states.pt"))[0]
    patch_record(rank1, "data.pkl", doubled_lr)
    code, rep = verify(src)
    failed = [f for f in rep["findings"] if f["check"] == "ranks-agree"]
    # The second group's 'lr' key is a memo reference in the pickle: only the first group changed.
    assert code == 2 and [f["subject"] for f in failed] == [os.path.basename(rank1) + ": key param_groups.0"], rep
    assert failed[0]["message"].startswith("lr=0.0056"), failed
    assert not [f for f in rep["findings"] if f["check"] == "zip-crc"], rep


def test_muon_copies_that_disagree_fail_ranks_agree(tmp_path):
    """DeepSpeed's Muon keeps fc2.weight's whole momentum buffer on both ranks (the parameter spans
    them): rank 1's copy changed in one float, its record's CRC rewritten, fails ranks-agree."""
    src = tmp_path / "ck"
    shutil.copytree(os.path.join(FIXTURES, "muon_z1_ws2", "checkpoint"), src)
    assert verify(src)[0] == 0
    shard = glob.glob(str(src / "*" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"))[0]
    osd = torch.load(shard, weights_only=False)["optimizer_state_dict"]
    want = osd["base_optimizer_state"]["state"][0]["momentum_buffer"].numpy().tobytes()
    with zipfile.ZipFile(shard) as z:
        record = next(i.filename for i in z.infolist() if "/data/" in i.filename and z.read(i) == want)
    patch_record(shard, record, lambda b: b[:8] + np.float32(1234.5).tobytes() + b[12:])
    code, rep = verify(src)
    failed = [f for f in rep["findings"] if f["check"] == "ranks-agree"]
    assert code == 2 and failed and "fc2.weight" in failed[0]["message"], rep
    assert not [f for f in rep["findings"] if f["check"] in ("zip-crc", "ds-index")], rep


# fp32 runs only: a bf16 run's Trainer saves the bf16 module, which diff shows as a dtype
# difference from the fp32 masters (verify's module-matches-masters compares the two).
TRAINER_SAVES = sorted(
    os.path.relpath(os.path.dirname(p), FIXTURES)
    for p in glob.glob(os.path.join(FIXTURES, "hf", "*", "run", "checkpoint-*", "model.safetensors"))
    if "bf16" not in p
)


@pytest.mark.parametrize("name", TRAINER_SAVES)
def test_trainer_tag_against_its_own_model_safetensors(tmp_path, name):
    """A Trainer + DeepSpeed run's checkpoint-N: the tag's masters against the model.safetensors the
    Trainer itself saved beside it (gpt2's tied lm_head.weight included), and against the tag's
    layouts/torch export re-saved by torch (moments, steps, both groups' hyper-parameters)."""
    ck = os.path.join(FIXTURES, name)
    code, rep = diff(ck, os.path.join(ck, "model.safetensors"))
    assert code == 0 and not bad_rows(rep), bad_rows(rep)
    view = torch_view(ck, tmp_path / "torch")
    torch.save(torch.load(view / "optimizer.pt"), view / "optimizer.pt")
    code, rep = diff(ck, view)
    assert code == 0 and not bad_rows(rep) and {"lr", "exp_avg_sq"} <= {r["state"] for r in rep["rows"]}, rep
