"""<T>_dcp/ (issue 28): each tag's whole training state as a torch.distributed.checkpoint folder.
Read with an independent DCP reader (dcp_reader.py: `.metadata` unpickled with Debian's Python,
every item torch.load-ed from the byte range it names, chunks checked to cover each tensor exactly
once) and compared with the DeepSpeed run's own live state (meta/live_state.pt, saved by the
oracle from the engine), its param group names (meta/train.json) and DeepSpeed's own converter
(ds_to_universal/). Also: a DCP item equals its universal twin in the same mount."""
import json
import os
import subprocess

import pytest
import torch

import dcp_reader
from conftest import FIXTURES, mount
from test_browse import read_safetensors

# Every source kind of issue 28 item 4 that has a live state: stages, sub-groups, round robin,
# elastic, BF16_Optimizer, bf16 and fp16 (masters in fp32 keys), frozen parameters and buffers.
KINDS = ["z1_ws2_fp32_pg2", "z2_ws2_fp32_pg2", "z3_ws2_fp32_pg2", "z3_ws2_fp32_pg2_sg200", "z1_ws2_fp32_pg2_rr",
         "z2_ws2_fp32_pg2_elastic", "z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2", "z3_ws2_bf16_pg2",
         "z2_ws2_fp16_pg2"]


def meta(name):
    m = json.load(open(os.path.join(FIXTURES, name, "meta", "train.json")))
    return m, torch.load(os.path.join(FIXTURES, name, "meta", "live_state.pt"))


def ds_universal(name, tag):
    return os.path.join(FIXTURES, name, "ds_to_universal", f"{tag}_universal", "zero")


@pytest.mark.parametrize("name", KINDS)
def test_dcp_holds_the_runs_live_state(name):
    info, live = meta(name)
    tag = info["tag"]
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        folder = f"{m}/{tag}_dcp"
        assert sorted(os.listdir(folder)) == [".metadata", "__0_0.distcp"]
        md, sd = dcp_reader.load(folder)
        assert md.version == "1.0.0"
        # Sizes at stat are the bytes read.
        for f in os.listdir(folder):
            assert os.stat(f"{folder}/{f}").st_size == len(open(f"{folder}/{f}", "rb").read())
        # The model: fp32 masters, frozen parameters, buffers; torchtitan's keys over the same bytes.
        model = {**live["fp32"], **live["frozen"], **live["buffers"]}
        assert {k[len("model."):] for k in sd if k.startswith("model.")} == set(model)
        for n, t in model.items():
            assert sd[f"model.{n}"].dtype == torch.float32 or n in live["frozen"] or n in live["buffers"]
            assert torch.equal(sd[f"model.{n}"].float(), t.float()), n
            assert torch.equal(sd[n], sd[f"model.{n}"]), n
        # The optimizer: moments by name, step, and DeepSpeed's hyper-parameters per group.
        # An elastic save keeps no param groups (DeepSpeed takes the loading engine's): names only.
        osd_file = os.path.join(ds_universal(name, tag), "optimizer_state.pt")
        elastic = name.endswith("_elastic")
        universal_osd = {"param_groups": [{}] * len(info["param_group_names"])} if elastic else torch.load(osd_file)
        groups = universal_osd["param_groups"] if "param_groups" in universal_osd else \
            universal_osd["optimizer_state_dict"]["param_groups"]
        if elastic:
            assert not [k for k in sd if k.startswith("optimizer.param_groups.0.") and not k.endswith(".params")]
        for n in live["fp32"]:
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(sd[f"optimizer.state.{n}.{k}"], live[k][n]), (n, k)
            # ZeRO-1/2: DeepSpeed's converter writes step.pt per parameter; ZeRO-3 keeps it per sub-group.
            step_file = os.path.join(ds_universal(name, tag), n, "step.pt")
            step = torch.load(step_file) if os.path.exists(step_file) else torch.tensor(float(info["steps"]))
            assert torch.equal(sd[f"optimizer.state.{n}.step"], step), n
        for g, names in enumerate(info["param_group_names"]):
            assert sd[f"optimizer.param_groups.{g}.params"] == names, "names in the group's own order"
            for hyper, value in groups[g].items():
                if hyper == "params":
                    continue
                assert sd[f"optimizer.param_groups.{g}.{hyper}"] == value, (g, hyper)
                for n in names:  # torchtitan's flatten_optimizer_state_dict family
                    assert sd[f"optimizer.param_groups.{n}.{hyper}"] == value, (n, hyper)
        # planner_data unflattens each key into the nested dict torch's get_state_dict returns.
        assert elastic or md.planner_data["optimizer.param_groups.0.lr"] == ("optimizer", "param_groups", 0, "lr")
        n = next(iter(live["fp32"]))
        assert md.planner_data[f"optimizer.state.{n}.exp_avg"] == ("optimizer", "state", n, "exp_avg")
        assert md.planner_data[f"model.{n}"] == ("model", n)


def test_a_dcp_item_and_its_universal_twin_agree():
    name = "z3_ws2_fp32_pg2"
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        tag = open(f"{m}/latest").read().strip()
        _, sd = dcp_reader.load(f"{m}/{tag}_dcp")
        for n in ("fc1.weight", "head.bias"):
            for k in ("fp32", "exp_avg", "exp_avg_sq"):
                twin = torch.load(f"{m}/{tag}_universal/zero/{n}/{k}.pt")["param"]
                item = sd[f"model.{n}"] if k == "fp32" else sd[f"optimizer.state.{n}.{k}"]
                assert torch.equal(item, twin), (n, k)


@pytest.mark.parametrize("name", ["z2_ws2_fp32_pg2_steps0", "z3_ws2_fp32_pg2_steps0"])
def test_a_save_before_the_first_step_gives_a_fresh_adams_state(name):
    info, live = meta(name)
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        _, sd = dcp_reader.load(f"{m}/{info['tag']}_dcp")
        for n, t in live["fp32"].items():
            assert torch.equal(sd[f"model.{n}"], t)
            assert torch.equal(sd[f"optimizer.state.{n}.exp_avg"], torch.zeros_like(t))
            assert torch.equal(sd[f"optimizer.state.{n}.exp_avg_sq"], torch.zeros_like(t))
            assert float(sd[f"optimizer.state.{n}.step"]) == 0.0


def test_a_pipeline_parallel_source_has_no_dcp_folder_and_says_why():
    with mount(os.path.join(FIXTURES, "pp2_dp1_z1", "checkpoint")) as m:
        assert not [e for e in os.listdir(m) if e.endswith("_dcp")]
        errors = open(f"{m}/.zeromount/errors").read()
        assert "_dcp: not made: a pipeline-parallel source" in errors, errors


@pytest.mark.parametrize("name", ["tp2_dp2_z2", "tp2_dp1_z1_swiglu", "tp2_dp1_z1_avg"])
def test_tensor_parallel_sources_are_merged_as_deepspeeds_converter_merges_them(name):
    """Masters and moments of a TP source equal ds_to_universal.py's merged files, name by name."""
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        tag = open(f"{m}/latest").read().strip()
        _, sd = dcp_reader.load(f"{m}/{tag}_dcp")
        zero = ds_universal(name, tag)
        names = [n for n in os.listdir(zero) if n != "optimizer_state.pt"]
        assert names
        for n in names:
            for k in ("fp32", "exp_avg", "exp_avg_sq"):
                want = torch.load(os.path.join(zero, n, f"{k}.pt"))["param"]
                got = sd[f"model.{n}"] if k == "fp32" else sd[f"optimizer.state.{n}.{k}"]
                assert torch.equal(got, want), (n, k)


def dcp_at(name):
    info, live = meta(name)
    return info, live, os.path.join(FIXTURES, name, "checkpoint")


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("name", ["z3_ws2_fp32_pg2", "z1_ws2_bf16_pg2_fp32acc"])
def test_fsdp_layout_is_cut_where_fsdp2_shards_and_holds_the_same_state(name, world):
    """layouts/fsdp-dp<W>/: Accelerate's two DCP folders, each tensor cut on dim 0 by torch.chunk's
    rule at W ranks, rank r's rows in __r_0.distcp only; the state equals <T>_dcp's."""
    info, live, src = dcp_at(name)
    with mount(src) as m:
        target = f"{m}/layouts/fsdp-dp{world}"
        assert {"pytorch_model_fsdp_0", "optimizer_0"} <= set(os.listdir(target))
        _, whole = dcp_reader.load(f"{m}/{info['tag']}_dcp")
        mmd, model = dcp_reader.load(f"{target}/pytorch_model_fsdp_0")
        omd, optim = dcp_reader.load(f"{target}/optimizer_0")
        assert sorted(os.listdir(f"{target}/pytorch_model_fsdp_0")) == \
            [".metadata"] + [f"__{r}_0.distcp" for r in range(world)]
        assert set(model) == {k for k in whole if k.startswith("model.")}
        assert set(optim) == {k for k in whole if k.startswith("optimizer.") and not any(
            k.startswith(f"optimizer.param_groups.{n}.") for n in live["fp32"])}
        for k, v in {**model, **optim}.items():
            assert torch.equal(v, whole[k]) if isinstance(v, torch.Tensor) else v == whole[k], k
        for md in (mmd, omd):
            for index, st in md.storage_data.items():
                meta_ = md.state_dict_metadata[index.fqn]
                if type(meta_).__name__ == "BytesStorageMetadata" or len(meta_.size) == 0:
                    assert st.relative_path == "__0_0.distcp"
                    continue
                rows = meta_.size[0]
                each = -(-rows // world)
                rank = index.offset[0] // each
                assert st.relative_path == f"__{rank}_0.distcp", (index.fqn, index.offset)
                assert index.offset[0] == rank * each


@pytest.mark.parametrize("name", ["z2_ws2_fp32_pg2", "z3_ws2_bf16_pg2", "z1_ws2_fp32_pg2_rr"])
def test_torch_layout_loads_into_a_plain_torch_optimizer(name):
    """layouts/torch/: model.safetensors holds the fp32 masters and optimizer.pt is what a torch
    AdamW over the same parameters, in DeepSpeed's group order, takes with load_state_dict."""
    info, live, src = dcp_at(name)
    with mount(src) as m:
        target = f"{m}/layouts/torch"
        weights = read_safetensors(f"{target}/model.safetensors")
        for n, t in live["fp32"].items():
            assert torch.equal(torch.from_numpy(weights[n].copy()), t), n
        # torch 1.13's weights-only unpickler lacks BINFLOAT (a real optimizer.pt's lr): 2.x has it.
        osd = torch.load(f"{target}/optimizer.pt", weights_only=not torch.__version__.startswith("1."))
        params = {n: torch.nn.Parameter(t.clone()) for n, t in live["fp32"].items()}
        groups = [{"params": [params[n] for n in names]} for names in info["param_group_names"]]
        opt = torch.optim.AdamW(groups)
        opt.load_state_dict(osd)
        for g, names in enumerate(info["param_group_names"]):
            assert opt.param_groups[g]["lr"] == osd["param_groups"][g]["lr"]
            for n in names:
                st = opt.state[params[n]]
                assert torch.equal(st["exp_avg"], live["exp_avg"][n]), n
                assert torch.equal(st["exp_avg_sq"], live["exp_avg_sq"][n]), n
                assert float(st["step"]) == float(info["steps"])
        assert "latest" not in os.listdir(target) and "zero_to_fp32.py" not in os.listdir(target)


def test_a_dcp_folder_too_big_to_plan_is_refused_not_built(tmp_path):
    """Anyone may look up layouts/fsdp-dp65536: a target whose DCP folders would hold more chunks
    than a plan may (kMaxDcpChunks) is refused with its reason, and a small W of it still works."""
    gen = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "tools",
                       "gen_ckpt.py")
    src = tmp_path / "many"
    subprocess.run(["/usr/bin/python3", gen, str(src), "--stage", "2", "--dp", "2", "--params", "40000",
                    "--numel-min", "16", "--numel-max", "128"], check=True, capture_output=True)
    with mount(str(src)) as m:
        assert not os.path.exists(f"{m}/layouts/fsdp-dp65536")
        errors = open(f"{m}/.zeromount/errors").read()
        assert "layouts/fsdp-dp65536: " in errors and "chunks at 65536 ranks, more than 2000000" in errors, errors
        assert sorted(os.listdir(f"{m}/layouts/fsdp-dp2/optimizer_0")) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
