"""layouts/<target>/ through a real mount, read by torch (an independent reader): every file of a
faked layout equals the real checkpoint DeepSpeed saved at that target (tests/fixtures/*/resaved),
key by key, with only the differences spec fake-layouts.md §7.1 allows."""
import os
import re

import pytest
import torch

import subprocess

from conftest import FIXTURES, ZEROMOUNT, mount

TAG = "global_step3"

# (fixture, target): real native checkpoints saved by DeepSpeed at the target.
CASES = [("z2_ws2_fp32_pg2", "zero3-dp4-fp32"), ("z3_ws2_fp32_pg2_sg200", "zero2-dp4-fp32"),
         ("z2_ws2_fp32_pg2", "zero1-dp3-fp32"), ("z2_ws2_bf16_pg2", "zero3-dp4-bf16")]

# Spec §7.1, the only allowed differences: these keys anywhere (SRC's ds_config/ds_version, stale
# global_samples; the resaved ds_config says load_universal), the loss scaler when the precision
# changes, the order of per-group state keys, and ZeRO-3 padding (compared on valid elements only).
ALWAYS_ALLOWED = {"ds_config", "ds_version", "global_samples"}
SCALER_KEYS = {"loss_scaler", "dynamic_loss_scale"}
STATE_DICT = re.compile(r"(base_optimizer_state|optimizer_state_dict)/state/\d+/$")


def object_state(o):
    return getattr(o, "state", None), type(o).__name__, type(o).__module__


def compare(ours, real, path, allowed, valid=None):
    assert type(ours) is type(real) or (
        type(ours).__name__ == type(real).__name__ and type(ours).__module__ == type(real).__module__), \
        (path, type(ours), type(real))
    if isinstance(real, torch.Tensor):
        assert ours.dtype == real.dtype and ours.shape == real.shape, (path, ours.dtype, real.dtype, ours.shape,
                                                                       real.shape)
        assert ours.requires_grad == real.requires_grad, path
        a, b = ours.reshape(-1), real.reshape(-1)
        if valid is not None:
            a, b = a[valid(path, a.numel())], b[valid(path, b.numel())]
        assert torch.equal(a, b), path
    elif isinstance(real, dict):
        keys_o, keys_r = list(ours.keys()), list(real.keys())
        if STATE_DICT.search(path):
            assert set(keys_o) == set(keys_r), (path, keys_o, keys_r)  # set order after a universal load
        else:
            assert keys_o == keys_r, (path, keys_o, keys_r)
        for k in keys_r:
            if k in ALWAYS_ALLOWED or k in allowed:
                continue
            compare(ours[k], real[k], f"{path}{k}/", allowed, valid)
    elif isinstance(real, (list, tuple)):
        assert len(ours) == len(real), path
        for i, (x, y) in enumerate(zip(ours, real)):
            compare(x, y, f"{path}{i}/", allowed, valid)
    elif isinstance(real, (set, int, float, str, bool, type(None), torch.Size, torch.dtype)):
        assert ours == real, (path, ours, real)
    else:  # DeepSpeed stand-ins (dsstub): loss scaler, ZeroStageEnum, fragment_address
        so, sr = object_state(ours), object_state(real)
        assert so[1:] == sr[1:], path
        assert getattr(ours, "args", None) == getattr(real, "args", None), path
        if isinstance(sr[0], dict):
            compare(so[0], sr[0], path + "state/", allowed, valid)
        else:
            assert so[0] == sr[0], path


def zero3_valid(real_dir, rank, world):
    """Masks of the real elements of rank r's stage-3 flat tensors, from the real files' param_shapes."""
    model = torch.load(os.path.join(real_dir, f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"),
                       weights_only=False)
    masks = []
    for shapes in model["param_shapes"]:
        m = []
        for s in shapes.values():
            n = s.numel()
            part = -(-n // world)
            m += [part * rank + i < n for i in range(part)]
        masks.append(torch.tensor(m, dtype=torch.bool))

    def valid(path, numel):
        parts = path.strip("/").split("/")
        if "fp32_flat_groups" in parts:
            return masks[int(parts[-1])]
        if "state" in parts and parts[-2] != "state":
            return masks[int(parts[parts.index("state") + 1])] if numel > 1 else slice(None)
        if "frozen_param_fragments" in parts:
            frozen = model["frozen_param_shapes"][parts[-1]].numel()
            return torch.arange(numel) + rank * numel < frozen
        return slice(None)
    return valid


def check_layout(ours_dir, fixture, target, real="resaved"):
    """real: 'resaved' (DeepSpeed re-saved the state at target) or 'checkpoint' (target is the
    source's own layout: the fake must be tensor-equal to the source's own files)."""
    real_dir = os.path.join(FIXTURES, fixture, real, *([target] if real == "resaved" else []),
                            os.path.basename(ours_dir))
    assert sorted(os.listdir(ours_dir)) == sorted(os.listdir(real_dir))
    precision = target.split("-")[2] if not target.startswith("bf16opt") else "bf16"
    src_precision = "bf16" if "bf16" in fixture else "fp16" if "fp16" in fixture else "fp32"
    allowed = SCALER_KEYS if precision != src_precision else set()
    world = int(target.split("-")[1][2:])
    for name in sorted(os.listdir(real_dir)):
        ours = torch.load(os.path.join(ours_dir, name), weights_only=False, map_location="cpu")
        real = torch.load(os.path.join(real_dir, name), weights_only=False, map_location="cpu")
        valid = None
        if target.startswith("zero3"):
            rank = int(re.search(r"zero_pp_rank_(\d+)_", name).group(1))
            valid = zero3_valid(real_dir, rank, world)
        compare(ours, real, name + ":", allowed, valid)


@pytest.mark.parametrize("fixture,target", CASES)
def test_fake_equals_resaved(fixture, target):
    with mount(os.path.join(FIXTURES, fixture, "checkpoint")) as mnt:
        d = os.path.join(mnt, "layouts", target)
        assert open(os.path.join(d, "latest")).read() == open(
            os.path.join(FIXTURES, fixture, "checkpoint", "latest")).read()
        check_layout(os.path.join(d, TAG), fixture, target)


# (fixture, its own layout): the listed self-check must be tensor-equal to the real files.
OWN = [("z1_ws2_fp32_pg2_rr", "zero1-dp2-fp32-rr")]


@pytest.mark.parametrize("fixture,target", OWN)
def test_own_layout_equals_the_real_files(fixture, target):
    with mount(os.path.join(FIXTURES, fixture, "checkpoint")) as mnt:
        assert target in os.listdir(os.path.join(mnt, "layouts"))
        check_layout(os.path.join(mnt, "layouts", target, TAG), fixture, target, real="checkpoint")


def test_listing_and_invalid_names():
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    with mount(src, "-o", "layouts=zero3-dp64-bf16,zero1-dp3-fp32") as mnt:
        root = os.path.join(mnt, "layouts")
        assert sorted(os.listdir(root)) == ["README", "zero1-dp3-fp32", "zero2-dp2-fp32", "zero3-dp64-bf16"]
        assert "zero2-dp2-fp32" in open(os.path.join(root, "README")).read()
        for bad in ("zero3-dp064-bf16", "zero3-dp0-fp32", "ZERO3-dp4-fp32", "zero3-dp4-fp32-rr", "bf16opt-dp4-bf16"):
            assert not os.path.exists(os.path.join(root, bad)), bad
        # Not listed, but made on lookup; rank files listed inside.
        tag = os.path.join(root, "zero2-dp5-bf16", TAG)
        assert len(os.listdir(tag)) == 6
        assert os.path.getsize(os.path.join(tag, "bf16_zero_pp_rank_4_mp_rank_00_optim_states.pt")) > 0
        assert "zero2-dp5-bf16" not in os.listdir(root)


def test_layouts_dir_option():
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    with mount(src, "-o", "layouts_dir=fakes") as mnt:
        assert not os.path.exists(os.path.join(mnt, "layouts"))
        assert os.path.isdir(os.path.join(mnt, "fakes", "zero3-dp2-fp32", TAG))


def test_inspect_layout_is_bounded_and_export_writes_a_load_dir(tmp_path):
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    r = subprocess.run([ZEROMOUNT, "inspect", src, "--layout", "zero3-dp65536-bf16"], capture_output=True, text=True,
                       check=True)
    assert "sub-group 0 (group 0)" in r.stdout and "more ranks" in r.stdout
    assert len(r.stdout.splitlines()) < 40, "bounded for large W"
    r = subprocess.run([ZEROMOUNT, "inspect", src, "--layout", "zero3-dp065536-bf16"], capture_output=True, text=True)
    assert r.returncode != 0 and "not a layout name" in r.stderr
    out = tmp_path / "fake"
    subprocess.run([ZEROMOUNT, "export", src, str(out), "--layout", "zero3-dp4-fp32"], check=True, capture_output=True)
    assert (out / "latest").read_text() == open(os.path.join(src, "latest")).read()
    check_layout(str(out / TAG), "z2_ws2_fp32_pg2", "zero3-dp4-fp32")
