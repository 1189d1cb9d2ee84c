"""Issue 19's real sources through a real mount, read by torch: a save before the first step,
per-group optimizer values other than 'step' (an int, a shape-[1] tensor), elastic saves, round
robin. Every view against the live engine's state (meta/live_state.pt), DeepSpeed's zero_to_fp32.py
output and the real files; DeepSpeed's ds_to_universal.py refuses all of them (ds_to_universal/FAILED.txt)."""
import glob
import os

import numpy as np
import pytest
import torch

from conftest import FIXTURES, mount
from test_browse import read_safetensors
from test_layouts import check_layout

EDGES = ["z1_ws2_fp32_pg2_steps0", "z2_ws2_fp32_pg2_steps0", "z3_ws2_fp32_pg2_steps0", "z2_ws2_fp32_pg2_hybrid",
         "z3_ws2_fp32_pg2_hybrid", "z2_ws2_fp32_pg2_elastic", "z2_ws2_fp32_pg2_elastic_fusedadam",
         "z1_ws2_fp32_pg2_rr"]


def tag_of(name):
    return open(os.path.join(FIXTURES, name, "checkpoint", "latest")).read().strip()


@pytest.fixture(scope="module", params=EDGES)
def mnt(request):
    with mount(os.path.join(FIXTURES, request.param, "checkpoint")) as m:
        yield request.param, m


def load(path):
    return torch.load(path, weights_only=False, map_location="cpu")


def group_state(name, group):
    """Rank 0's optimizer state of one group (sub-group), as DeepSpeed saved it."""
    tag = os.path.join(FIXTURES, name, "checkpoint", tag_of(name))
    osd = load(glob.glob(os.path.join(tag, "*zero_pp_rank_0_mp_rank_00_optim_states.pt"))[0])["optimizer_state_dict"]
    base = osd.get("base_optimizer_state", osd.get("optimizer_state_dict"))
    state = base if isinstance(base, list) else base["state"]
    return state[group] if state else {}


def test_universal_equals_the_live_state(mnt):
    name, m = mnt
    tag = tag_of(name)
    live = load(os.path.join(FIXTURES, name, "meta", "live_state.pt"))
    zero = os.path.join(m, f"{tag}_universal", "zero")
    for param, want in live["fp32"].items():
        files = sorted(os.listdir(os.path.join(zero, param)))
        assert torch.equal(load(os.path.join(zero, param, "fp32.pt"))["param"], want), param
        for key in ("exp_avg", "exp_avg_sq"):
            if live[key]:
                assert torch.equal(load(os.path.join(zero, param, f"{key}.pt"))["param"], live[key][param]), param
            else:  # never stepped, or an optimizer without moments: no file, as there is no state
                assert f"{key}.pt" not in files, param
        # Every per-group key, as the optimizer saved it for the parameter's group.
        g = 1 if param.endswith("bias") or param.startswith("norm.") else 0
        for key, value in group_state(name, g if "z3" not in name else g).items():
            if torch.is_tensor(value) and value.dim() == 1 and value.numel() > 1:
                continue  # partitioned, compared above
            ours = load(os.path.join(zero, param, f"{key}.pt"))
            assert type(ours) is type(value), (param, key)
            assert (torch.equal(ours, value) if torch.is_tensor(value) else ours == value), (param, key)
    opt = load(os.path.join(zero, "optimizer_state.pt"))
    if not live["exp_avg"] and "hybrid" not in name:
        assert opt["optimizer_state_dict"]["state"] == {}, "no state before the first step"


def test_params_npy_equal_the_live_state(mnt):
    name, m = mnt
    live = load(os.path.join(FIXTURES, name, "meta", "live_state.pt"))
    folder = os.path.join(m, f"{tag_of(name)}_params")
    for param, want in live["fp32"].items():
        states = sorted(f for f in os.listdir(os.path.join(folder, param)) if f.endswith(".npy"))
        assert states == sorted(["fp32.npy"] + [f"{k}.npy" for k in ("exp_avg", "exp_avg_sq") if live[k]]), param
        for f in states:
            ref = want if f == "fp32.npy" else live[f[:-4]][param]
            assert np.array_equal(np.load(os.path.join(folder, param, f), mmap_mode="r"), ref.numpy()), (param, f)


def test_model_safetensors_equals_zero_to_fp32(mnt):
    name, m = mnt
    ours = read_safetensors(os.path.join(m, f"{tag_of(name)}_fp32", "model.safetensors"))
    theirs = read_safetensors(os.path.join(FIXTURES, name, "zero_to_fp32", "model.safetensors"))
    live = load(os.path.join(FIXTURES, name, "meta", "live_state.pt"))
    for k, v in theirs.items():
        if name.endswith("_rr") and k in live["fp32"]:
            # zero_to_fp32.py slices round-robin partitions in the wrong order: the live state rules.
            assert ours[k].tobytes() == live["fp32"][k].numpy().tobytes(), k
            continue
        assert ours[k].dtype == v.dtype and ours[k].shape == v.shape and ours[k].tobytes() == v.tobytes(), k


def test_own_layout_equals_the_real_files(mnt):
    name, m = mnt
    readme = open(os.path.join(m, "layouts", "README")).read()
    own = readme.split("own layout: ")[1].split()[0]
    assert own in os.listdir(os.path.join(m, "layouts"))
    check_layout(os.path.join(m, "layouts", own, tag_of(name)), name, own, real="checkpoint")


@pytest.mark.parametrize("name", [n for n in EDGES if "elastic" in n])
def test_elastic_sources_are_faked_in_their_form(name):
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        check_elastic_fakes(name, m)


def check_elastic_fakes(name, m):
    root = os.path.join(m, "layouts")
    for refused in ("zero3-dp2-fp32", "bf16opt-dp2"):
        assert not os.path.exists(os.path.join(root, refused)), refused
    fake = os.path.join(root, "zero2-dp3-fp32", tag_of(name))
    live = load(os.path.join(FIXTURES, name, "meta", "live_state.pt"))
    sizes = []
    for r in range(3):
        osd = load(os.path.join(fake, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))["optimizer_state_dict"]
        base = osd["base_optimizer_state"]
        assert isinstance(base, list) and len(base) == 2, "one state per group, no param_groups"
        for g, (st, fp32) in enumerate(zip(base, osd["single_partition_of_fp32_groups"])):
            assert st["exp_avg"].shape == fp32.shape, "cut to the valid elements, as DeepSpeed cuts them"
            sizes.append(fp32.numel())
        real = load(glob.glob(os.path.join(FIXTURES, name, "checkpoint", tag_of(name), "*rank_0_*optim*"))[0])
        step = real["optimizer_state_dict"].get("base_optimizer_state_step")
        assert osd.get("base_optimizer_state_step") == step
    assert sum(sizes) == sum(t.numel() for t in live["fp32"].values())
