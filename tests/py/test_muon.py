"""DeepSpeed's Muon optimizer (issue 32) through a real mount. MuonWithAuxAdam keeps
'momentum_buffer' in its Muon group and Adam's moments in the other, and each rank holds the *whole*
buffer of every Muon parameter its partition touches (stage_1_and_2.py, get_flat_partition).

The ground truth is rebuilt here, independently of zeromount, from the shards as torch loads them:
each rank's buffer cut by its own param_slice_mappings (in partition order) and param_shapes, every
parameter on two ranks checked equal on both; the masters and Adam's moments from the flat
partitions, re-cut by DeepSpeed's partition rule. The oracle's next-step proofs (DeepSpeed loading
these views) are in docs/oracle-results.md."""
import json
import os
import shutil
import struct
import subprocess
import zipfile

import numpy as np
import pytest
import torch

import dcp_reader
from conftest import FIXTURES, ZEROMOUNT, mount
from test_layouts import check_layout

# The two shared fixtures (2 ranks) and a 3-rank ZeRO-2 run made by the same script (tests/fixtures/README.md).
MUON = ["muon_z1_ws2", "muon_z2_ws2", "muon_z2_ws3"]
TAG = "global_step2"


def shards(name):
    d = os.path.join(FIXTURES, name, "checkpoint", TAG)
    model = torch.load(f"{d}/mp_rank_00_model_states.pt", weights_only=False)
    ranks = [torch.load(f"{d}/zero_pp_rank_{r}_mp_rank_00_optim_states.pt", weights_only=False)
             ["optimizer_state_dict"] for r in range(model["dp_world_size"])]
    return model, ranks


def in_partition_order(osd, g):
    return [n for n, _ in sorted(osd["param_slice_mappings"][g].items(), key=lambda kv: kv[1].state["start"])]


def rebuilt_buffers(model, ranks):
    """Muon's whole buffer of each of its parameters, cut from every rank that holds one."""
    shapes = {n: torch.Size(s) for g in model["param_shapes"] for n, s in g.items()}
    out = {}
    for osd in ranks:
        base = osd["base_optimizer_state"]
        for g, group in enumerate(base["param_groups"]):
            if not group.get("use_muon"):
                continue
            buf, at = base["state"][g]["momentum_buffer"], 0
            for n in in_partition_order(osd, g):
                piece = buf[at:at + shapes[n].numel()].view(shapes[n])
                at += shapes[n].numel()
                if n in out:
                    assert torch.equal(out[n], piece), f"the two ranks' copies of {n} differ"
                out[n] = piece
            assert at == buf.numel()
    return out


def full_flat(ranks, g, key):
    """Group g's whole flat state `key` (the masters for 'fp32'), padding cut, ranks joined."""
    parts = []
    for osd in ranks:
        fp32 = osd["single_partition_of_fp32_groups"][g]
        t = fp32 if key == "fp32" else osd["base_optimizer_state"]["state"][g][key]
        parts.append(t[:fp32.numel()])
    return torch.cat(parts)


def adam_state(model, ranks, key):
    """Each Adam-group parameter's `key`, cut from the joined flat state in param_shapes order."""
    out = {}
    for g, shapes in enumerate(model["param_shapes"]):
        if ranks[0]["base_optimizer_state"]["param_groups"][g].get("use_muon"):
            continue
        flat, at = full_flat(ranks, g, key), 0
        for n, s in shapes.items():
            s = torch.Size(s)
            out[n] = flat[at:at + s.numel()].view(s)
            at += s.numel()
    return out


@pytest.mark.parametrize("name", MUON)
def test_index_and_the_per_parameter_views(name):
    model, ranks = shards(name)
    buffers = rebuilt_buffers(model, ranks)
    train = json.load(open(os.path.join(FIXTURES, name, "meta", "train.json")))
    assert sorted(buffers) == train["muon"]
    exp_avg = adam_state(model, ranks, "exp_avg")
    live = torch.load(os.path.join(FIXTURES, name, "meta", "live_state.pt"))
    src = os.path.join(FIXTURES, name, "checkpoint")
    js = json.loads(subprocess.run([ZEROMOUNT, "inspect", src, "--json"], capture_output=True, text=True,
                                   check=True).stdout)
    assert js["whole_states"] == ["momentum_buffer"]
    assert js["group_states"] == [["fp32", "momentum_buffer"], ["fp32", "exp_avg", "exp_avg_sq"]]
    assert js["step"] == 2
    with mount(src) as m:
        for n, want in buffers.items():
            got = np.load(f"{m}/{TAG}_params/{n}/momentum_buffer.npy")
            assert np.array_equal(got, want.numpy()), n
            u = torch.load(f"{m}/{TAG}_universal/zero/{n}/momentum_buffer.pt")
            assert torch.equal(u["param"], want), n
            assert sorted(os.listdir(f"{m}/{TAG}_universal/zero/{n}")) == ["fp32.pt", "momentum_buffer.pt"]
            assert not os.path.exists(f"{m}/{TAG}_params/{n}/exp_avg.npy")
            assert "momentum_buffer (Muon" in open(f"{m}/{TAG}_params/{n}/info").read()
        for n, want in exp_avg.items():
            assert torch.equal(torch.load(f"{m}/{TAG}_universal/zero/{n}/exp_avg.pt")["param"], want), n
            assert torch.load(f"{m}/{TAG}_universal/zero/{n}/step.pt") == 2
            assert not os.path.exists(f"{m}/{TAG}_params/{n}/momentum_buffer.npy")
        for n, w in live["fp32"].items():
            assert torch.equal(torch.load(f"{m}/{TAG}_universal/zero/{n}/fp32.pt")["param"], w), n
        # The universal optimizer_state.pt: the Muon group keeps no 'step', the Adam group its own.
        osd = torch.load(f"{m}/{TAG}_universal/zero/optimizer_state.pt", weights_only=False)
        state = osd["optimizer_state_dict"]["state"]
        assert "step" not in state[0] or state[0]["step"] is None
        assert state[1]["step"] == 2
        # The report pages build, with a row per parameter.
        page = open(f"{m}/{TAG}_params/report.html").read()
        assert all(n in page for n in buffers)


@pytest.mark.parametrize("name", MUON)
def test_torch_native_views_carry_the_momentum_buffer(name):
    model, ranks = shards(name)
    buffers = rebuilt_buffers(model, ranks)
    moments = {k: adam_state(model, ranks, k) for k in ("exp_avg", "exp_avg_sq")}
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        _, sd = dcp_reader.load(f"{m}/{TAG}_dcp")
        for n, want in buffers.items():  # torch.optim.Muon's key
            assert torch.equal(sd[f"optimizer.state.{n}.momentum_buffer"], want), n
            assert f"optimizer.state.{n}.exp_avg" not in sd and f"optimizer.state.{n}.step" not in sd
        for k, by_name in moments.items():
            for n, want in by_name.items():
                assert torch.equal(sd[f"optimizer.state.{n}.{k}"], want), (n, k)
                assert sd[f"optimizer.state.{n}.step"] == 2
        assert sd["optimizer.param_groups.0.use_muon"] is True and sd["optimizer.param_groups.1.use_muon"] is False
        # optimizer.pt: torch's index-keyed state_dict(), each parameter with its own group's state.
        o = torch.load(f"{m}/layouts/torch/optimizer.pt", weights_only=False)
        names = [n for g in range(len(o["param_groups"])) for n in sd[f"optimizer.param_groups.{g}.params"]]
        assert [i for g in o["param_groups"] for i in g["params"]] == list(range(len(names)))
        for i, n in enumerate(names):
            if n in buffers:
                assert set(o["state"][i]) == {"momentum_buffer"} and torch.equal(o["state"][i]["momentum_buffer"],
                                                                                 buffers[n]), n
            else:
                assert set(o["state"][i]) == {"step", "exp_avg", "exp_avg_sq"}, n
                assert torch.equal(o["state"][i]["exp_avg"], moments["exp_avg"][n]), n


# (source, target): a stage change, DP changes up and down, the source's own layout.
TARGETS = [("muon_z1_ws2", "zero2-dp3-fp32"), ("muon_z2_ws2", "zero1-dp4-fp32"), ("muon_z2_ws2", "zero2-dp1-fp32"),
           ("muon_z1_ws2", "zero1-dp5-fp32"), ("muon_z2_ws3", "zero1-dp2-fp32"), ("muon_z2_ws3", "zero2-dp7-fp32")]


@pytest.mark.parametrize("name,target", TARGETS)
def test_faked_layouts_recut_the_buffers_by_the_targets_overlap_rule(name, target):
    model, ranks = shards(name)
    buffers = rebuilt_buffers(model, ranks)
    world = int(target.split("-")[1][2:])
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        d = f"{m}/layouts/{target}/{TAG}"
        for r in range(world):
            osd = torch.load(f"{d}/zero_pp_rank_{r}_mp_rank_00_optim_states.pt", weights_only=False)[
                "optimizer_state_dict"]
            base = osd["base_optimizer_state"]
            for g, group in enumerate(base["param_groups"]):
                state = base["state"].get(g, {})
                P = state["exp_avg"].numel() if "exp_avg" in state else None
                if group["use_muon"]:
                    # The target rank's partition touches these parameters: their whole buffers, in order.
                    order = in_partition_order(osd, g)
                    if not order:
                        assert g not in base["state"]
                        continue
                    want = torch.cat([buffers[n].reshape(-1) for n in order])
                    assert set(state) == {"momentum_buffer"} and torch.equal(state["momentum_buffer"], want), (r, g)
                    P = osd["single_partition_of_fp32_groups"][g].numel() + osd["group_paddings"][g]
                else:
                    assert set(state) == {"exp_avg", "exp_avg_sq", "step"} and state["step"] == 2
                    for k in ("exp_avg", "exp_avg_sq"):  # DeepSpeed's rule: rank r holds [rP, rP + P)
                        flat = full_flat(ranks, g, k)
                        want = torch.zeros(P)
                        piece = flat[r * P:(r + 1) * P]
                        want[:piece.numel()] = piece
                        assert torch.equal(state[k], want), (r, g, k)
                flat = full_flat(ranks, g, "fp32")
                fp32 = osd["single_partition_of_fp32_groups"][g]
                assert torch.equal(fp32, flat[r * P:r * P + fp32.numel()]), (r, g)


@pytest.mark.parametrize("name", MUON)
def test_own_layout_equals_the_real_files(name):
    own = f"zero{name[6]}-dp{name[-1]}-fp32"  # muon_z<stage>_ws<dp>
    with mount(os.path.join(FIXTURES, name, "checkpoint")) as m:
        check_layout(f"{m}/layouts/{own}/{TAG}", name, own, real="checkpoint")


def test_targets_that_cannot_hold_muon_are_refused_with_their_reason():
    with mount(os.path.join(FIXTURES, "muon_z2_ws2", "checkpoint")) as m:
        for target in ("zero3-dp2-fp32", "bf16opt-dp2"):
            assert not os.path.exists(f"{m}/layouts/{target}")
        errors = open(f"{m}/.zeromount/errors").read()
        for target in ("zero3-dp2-fp32", "bf16opt-dp2"):
            assert f"layouts/{target}: " in errors and "Muon" in errors, errors


def test_a_copy_that_disagrees_refuses_the_tag_naming_file_and_parameter(tmp_path):
    src = tmp_path / "ckpt"
    shutil.copytree(os.path.join(FIXTURES, "muon_z1_ws2", "checkpoint"), src)
    shard = src / TAG / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    # Rank 1's buffer begins with its copy of fc2.weight (the parameter both ranks touch): flip one
    # float of it in place (torch.save stores records uncompressed; there is no CRC check on load).
    osd = torch.load(shard, weights_only=False)["optimizer_state_dict"]
    assert in_partition_order(osd, 0)[0] == "fc2.weight"
    key = None
    with zipfile.ZipFile(shard) as z:
        want = osd["base_optimizer_state"]["state"][0]["momentum_buffer"].numpy().tobytes()
        for info in z.infolist():
            if "/data/" in info.filename and z.read(info) == want:
                key = info
        assert key is not None
        data = bytearray(open(shard, "rb").read())
        # The local header's own name and extra lengths (torch pads the extra field to align data).
        name_len, extra_len = struct.unpack("<HH", bytes(data[key.header_offset + 26:key.header_offset + 30]))
        at = key.header_offset + 30 + name_len + extra_len
        assert bytes(data[at:at + len(want)]) == want
        data[at + 8:at + 12] = np.float32(1234.5).tobytes()
    shard.write_bytes(bytes(data))
    with mount(str(src)) as m:
        assert TAG not in [e for e in os.listdir(m) if e.endswith("_universal")] and \
            not os.path.exists(f"{m}/{TAG}_universal")
        errors = open(f"{m}/.zeromount/errors").read()
        assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in errors and "fc2.weight" in errors, errors
        assert "differs from rank 0's" in errors, errors
        # Either copy may be the damaged one: both files are named (issue 40).
        assert "zero_pp_rank_0_mp_rank_00_optim_states.pt" in errors, errors
