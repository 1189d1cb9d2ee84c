"""DCP folders as sources (issue 41): real FSDP2 saves by torch 2.14 (FSDP2, torchtitan, the
Trainer/Accelerate folders, model only, bf16-mixed; W = 2 and 3), mounted; every view that is made
of them holds the run's live state, read by independent readers: numpy for safetensors, the
stand-in unpickler of dcp_reader.py for DCP, and torch.load of the live state the run dumped."""
import os
import shutil

import pytest
import torch

import dcp_reader
from conftest import FIXTURES, mount
from test_browse import read_safetensors

DCP = os.path.join(FIXTURES, "dcp")
STYLES = ["fsdp2_ws2_fp32", "fsdp2_ws3_fp32", "torchtitan_ws2_fp32", "hf_fsdp_ws2_fp32", "fsdp2_ws2_bf16mixed",
          "fsdp2_ws2_model_only"]


def live(name):
    # Saved by torch 2.14: Debian's torch 1.13 reads it whole, not with weights_only.
    return torch.load(os.path.join(DCP, name, "meta", "live_state.torch"), weights_only=False)


def tag_of(name):
    return "checkpoint-3" if name.startswith("hf_") else "step-3"


def model_only(name):
    return name.endswith("model_only")


@pytest.mark.parametrize("name", STYLES)
def test_weights_folder_holds_the_live_model(name):
    state = live(name)
    with mount(os.path.join(DCP, name, "checkpoint")) as m:
        weights = read_safetensors(f"{m}/{tag_of(name)}_fp32/model.safetensors")
        want = {**state["fp32"], **state["frozen"], **state["buffers"]}
        assert set(weights) == set(want)
        for k, t in want.items():
            assert weights[k].tobytes() == t.numpy().tobytes(), k


@pytest.mark.parametrize("name", STYLES)
def test_dcp_and_fsdp_layouts_hold_the_live_state(name):
    state = live(name)
    with mount(os.path.join(DCP, name, "checkpoint")) as m:
        _, sd = dcp_reader.load(f"{m}/{tag_of(name)}_dcp")
        model = {**state["fp32"], **state["frozen"], **state["buffers"]}
        for k, t in model.items():
            assert torch.equal(sd[f"model.{k}"], t), k
        optimizer_keys = [k for k in sd if k.startswith("optimizer.")]
        if model_only(name):
            assert optimizer_keys == []
            assert sorted(os.listdir(f"{m}/layouts/fsdp-dp2")) == ["pytorch_model_fsdp_0"]
            return
        for family in ("exp_avg", "exp_avg_sq"):
            for k, t in state[family].items():
                assert torch.equal(sd[f"optimizer.state.{k}.{family}"], t), (family, k)
        for k, t in state["step"].items():
            assert float(sd[f"optimizer.state.{k}.step"]) == float(t), k
        for g, group in enumerate(state["param_groups"]):
            assert sd[f"optimizer.param_groups.{g}.params"] == group["params"]
            for hyper, v in group.items():
                if hyper != "params":
                    got = sd[f"optimizer.param_groups.{g}.{hyper}"]
                    assert (list(got) if isinstance(got, tuple) else got) == v, (g, hyper)
        # Re-cut at another world size: the same values, rank r's rows in __r_0.distcp.
        _, model3 = dcp_reader.load(f"{m}/layouts/fsdp-dp3/pytorch_model_fsdp_0")
        _, optim3 = dcp_reader.load(f"{m}/layouts/fsdp-dp3/optimizer_0")
        for k, v in {**model3, **optim3}.items():
            assert torch.equal(v, sd[k]) if isinstance(v, torch.Tensor) else v == sd[k], k


@pytest.mark.parametrize("name", ["fsdp2_ws2_fp32", "fsdp2_ws3_fp32", "fsdp2_ws2_bf16mixed"])
def test_the_sources_own_keys_read_the_same_through_the_mount(name):
    """torch's own folder and the mount's <T>_dcp agree key by key on what the source holds."""
    src = os.path.join(DCP, name, "checkpoint", "step-3")
    _, theirs = dcp_reader.load(src)
    with mount(os.path.join(DCP, name, "checkpoint")) as m:
        _, ours = dcp_reader.load(f"{m}/step-3_dcp")
    for k, v in theirs.items():
        assert k in ours, k
        assert torch.equal(ours[k], v) if isinstance(v, torch.Tensor) else ours[k] == v, k


def test_views_a_dcp_source_cannot_make_say_why():
    with mount(os.path.join(DCP, "fsdp2_ws2_fp32", "checkpoint")) as m:
        assert not os.path.exists(f"{m}/step-3_universal")
        errors = open(f"{m}/.zeromount/errors").read()
        assert "step-3_universal: not made: a DCP source (fsdp2)" in errors, errors
        assert not os.path.exists(f"{m}/layouts/zero2-dp2-fp32")
        assert "has no DeepSpeed model-state files" in open(f"{m}/.zeromount/errors").read()
        assert "step-3" in open(f"{m}/step-3_params/summary").read() or os.path.exists(f"{m}/step-3_params/summary")


def test_a_damaged_dcp_source_is_refused_with_the_key_named(tmp_path):
    src = tmp_path / "ckpt"
    shutil.copytree(os.path.join(DCP, "fsdp2_ws2_fp32", "checkpoint"), src)
    shutil.copytree(src / "step-3", src / "step-4")
    data = src / "step-4" / "__1_0.distcp"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) - 100)
    with mount(str(src)) as m:
        names = os.listdir(m)
        assert "step-3_fp32" in names and "step-4_fp32" not in names, "one broken tag never takes the folder down"
        errors = open(f"{m}/.zeromount/errors").read()
        assert "step-4" in errors and "__1_0.distcp" in errors and "key '" in errors, errors


def test_a_trainer_fsdp_checkpoint_gives_its_config_to_the_weights_folder(tmp_path):
    """The Trainer under FSDP saves config.json into checkpoint-N/, the tag itself: from_pretrained
    of <T>_fp32/ needs it there."""
    src = tmp_path / "run"
    shutil.copytree(os.path.join(DCP, "hf_fsdp_ws2_fp32", "checkpoint"), src)
    config = '{"model_type": "llama", "hidden_size": 12}\n'
    (src / "checkpoint-3" / "config.json").write_text(config)
    with mount(str(src)) as m:
        assert open(f"{m}/checkpoint-3_fp32/config.json").read() == config
        assert "model.safetensors" in os.listdir(f"{m}/checkpoint-3_fp32")
