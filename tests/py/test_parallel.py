"""Real mounts of the tensor-, pipeline- and expert-parallel fixtures (issue 15): `<T>_universal`
equals DeepSpeed's ds_to_universal.py output (file list, every tensor bit for bit, every extra key
of every per-parameter dict), model.safetensors holds the merged tensors, and the checkpoints
DeepSpeed refuses are refused with the reason."""
import os
import pickle
import subprocess

import numpy as np
import pytest
import torch

from test_browse import read_safetensors

from conftest import FIXTURES, ZEROMOUNT, mount

TAG = "global_step2"
PARALLEL = ["tp2_dp1_z1", "tp2_dp2_z2", "tp2_dp1_z3", "tp2_dp1_z1_fused", "tp2_dp1_z1_avg", "tp2_dp1_z1_swiglu",
            "pp2_dp1_z1", "pp2_tp2_z1_patterns", "tp2_dp1_z2_frozen", "autoep_ep2_z2"]
# Mount options and the converter output each fixture is compared with.
OPTIONS = {"tp2_dp1_z2_frozen": ["--tp-no-strict"]}
REF = {"tp2_dp1_z2_frozen": "ds_to_universal_no_strict"}
REFUSED = {
    "tp2_dp1_z2_frozen": "Unused patterns=['^norm\\\\.bias$'] while merging tp slices",
    "moe_ep2_z2": "Required universal_checkpoint_info state is missing",
    "pp2_dp2_z1_tiedsplit": "RuntimeError: shape '[16, 16]' is invalid for input of size 352",
}


@pytest.fixture(scope="module", params=PARALLEL)
def mnt(request):
    with mount(os.path.join(FIXTURES, request.param, "checkpoint"), *OPTIONS.get(request.param, [])) as m:
        yield request.param, m


def ref_dir(name):
    return os.path.join(FIXTURES, name, REF.get(name, "ds_to_universal"), f"{TAG}_universal")


def listing(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def test_file_list_equals_the_converter(mnt):
    name, m = mnt
    assert listing(f"{m}/{TAG}_universal") == listing(ref_dir(name))


def storage_bits(t):
    """The whole storage (a vocabulary tensor keeps its padding rows there), as integers."""
    whole = t.detach().new_empty(0).set_(t.detach().storage())
    return whole.view(torch.int32) if t.dtype == torch.float32 else whole


def same_value(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and
                a.stride() == b.stride() and a.storage_offset() == b.storage_offset() and
                a.requires_grad == b.requires_grad and torch.equal(storage_bits(a), storage_bits(b)))
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return type(a).__name__ == type(b).__name__ and vars(a) == vars(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("weights_only", [True, False])
def test_every_file_equals_the_converter(mnt, weights_only):
    name, m = mnt
    ref = ref_dir(name)
    checked = 0
    for rel in sorted(listing(ref)):
        if not rel.startswith("zero/") or rel == "zero/optimizer_state.pt":
            continue
        try:
            theirs = torch.load(f"{ref}/{rel}", weights_only=weights_only)
        except pickle.UnpicklingError:  # SubparamShape is no weights-only class: ours must fail alike
            with pytest.raises(pickle.UnpicklingError):
                torch.load(f"{m}/{TAG}_universal/{rel}", weights_only=weights_only)
            continue
        ours = torch.load(f"{m}/{TAG}_universal/{rel}", weights_only=weights_only)
        if isinstance(theirs, dict):
            assert list(ours) == list(theirs), rel  # the keys, in the converter's order
            for k in theirs:
                assert same_value(ours[k], theirs[k]), f"{rel}: {k}"
        else:
            assert same_value(ours, theirs), rel
        checked += 1
    assert checked >= 10


def zip_records(path):
    """Each record's bytes. zeromount writes CRC 0 (torch.load never checks it), so none is checked."""
    import zipfile
    out = {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            with z.open(info) as fh:
                fh._expected_crc = None
                out[info.filename.split("/", 1)[1]] = fh.read()
    return out


def test_model_states_are_byte_identical(mnt):
    name, m = mnt
    ref = ref_dir(name)
    checked = 0
    for f in os.listdir(ref):
        if not f.endswith("_model_states.pt"):
            continue
        checked += 1
        if not name.startswith("autoep"):
            with open(f"{m}/{TAG}_universal/{f}", "rb") as a, open(f"{ref}/{f}", "rb") as b:
                assert a.read() == b.read(), f
            continue
        # AutoEP: the converter re-saves the file (torch.save). data.pkl and every storage record are
        # equal byte for byte; torch's extra records (.format_version, .storage_alignment,
        # .data/serialization_id) are not written by zeromount.
        ours, theirs = zip_records(f"{m}/{TAG}_universal/{f}"), zip_records(f"{ref}/{f}")
        assert ours["data.pkl"] == theirs["data.pkl"], f
        for rec, data in theirs.items():
            if rec.startswith("data/") or rec in ("byteorder", "version"):
                assert ours.get(rec) == data, f"{f}: {rec}"
        assert set(ours) - set(theirs) == set(), f
        a = torch.load(f"{m}/{TAG}_universal/{f}", weights_only=False)
        b = torch.load(f"{ref}/{f}", weights_only=False)
        assert a["universal_checkpoint_info"] == b["universal_checkpoint_info"]
        assert list(a) == list(b)
    assert checked >= 1


def test_model_safetensors_holds_the_merged_params(mnt):
    name, m = mnt
    ref = ref_dir(name)
    st = read_safetensors(f"{m}/{TAG}_fp32/model.safetensors")
    for p in os.listdir(f"{ref}/zero"):
        if os.path.isdir(f"{ref}/zero/{p}"):
            want = torch.load(f"{ref}/zero/{p}/fp32.pt", weights_only=False)
            want = want["param"] if isinstance(want, dict) else want
            assert torch.equal(torch.from_numpy(st[p].copy()), want.detach()), p


def test_params_npy_holds_the_merged_params(mnt):
    name, m = mnt
    ref = ref_dir(name)
    for p in os.listdir(f"{ref}/zero"):
        if os.path.isdir(f"{ref}/zero/{p}"):
            for state in ("fp32", "exp_avg"):
                want = torch.load(f"{ref}/zero/{p}/{state}.pt", weights_only=False)
                want = want["param"] if isinstance(want, dict) else want
                ours = torch.from_numpy(np.load(f"{m}/{TAG}_params/{p}/{state}.npy"))
                assert torch.equal(ours, want.detach()), f"{p}/{state}"
            with open(f"{m}/{TAG}_params/{p}/info") as fh:
                assert "merge" in fh.read()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_the_reason(name):
    src = os.path.join(FIXTURES, name, "checkpoint")
    with mount(src) as m:  # the tag is not served; its real files are, with the reason beside them
        assert f"{TAG}_universal" not in os.listdir(m) and TAG in os.listdir(m)
        with open(f"{m}/.zeromount/errors") as f:
            assert REFUSED[name] in f.read()
    with mount(src, "--tag", TAG, expect_fail=True) as r:
        assert REFUSED[name] in r.stderr, r.stderr
    out = subprocess.run([ZEROMOUNT, "inspect", os.path.join(FIXTURES, name, "checkpoint")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and REFUSED[name] in out.stderr, out.stderr


def autoep_copy(tmp_path, edit):
    """autoep_ep2_z2's tag with its mp_rank_00 re-saved after `edit(state)`."""
    import shutil
    src = os.path.join(FIXTURES, "autoep_ep2_z2", "checkpoint", TAG)
    dst = tmp_path / TAG
    shutil.copytree(src, dst)
    f = dst / "mp_rank_00_model_states.pt"
    sd = torch.load(f, weights_only=False)
    edit(sd)
    torch.save(sd, f)
    return subprocess.run([ZEROMOUNT, "inspect", str(dst)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ZEROMOUNT_NO_INDEX_CACHE": "1"})


def test_autoep_dp_not_divisible_by_ep_is_refused(tmp_path):
    def edit(sd):
        for layers in (sd["ds_autoep_layers"], sd["universal_checkpoint_info"]["ds_autoep_layers"]):
            layers[0].update(num_experts=6, num_local_experts=2, ep_size=3)
    out = autoep_copy(tmp_path, edit)
    assert out.returncode != 0 and "ZeRO DP degree 2 is not divisible by AutoEP size 3." in out.stderr, out.stderr


def test_autoep_metadata_is_checked_as_deepspeed_does(tmp_path):
    def edit(sd):
        sd["ds_autoep_layers"][0]["num_experts"] = 5
    out = autoep_copy(tmp_path, edit)
    assert out.returncode != 0 and "AutoEP expert count mismatch for model.layers.0.mlp.experts" in out.stderr


def test_autoep_contiguous_expert_order_is_accepted(tmp_path):
    def edit(sd):
        sd["ds_config"]["use_data_before_expert_parallelism"] = True
    out = autoep_copy(tmp_path, edit)  # with dp 2 and ep 2 both orders give ranks [0] and [1]
    assert out.returncode == 0 and "AutoEP experts" in out.stdout, out.stderr


# layouts/ of a parallel source: the source merged to TP = PP = 1, served whole or not at all.
SERVED = {"tp2_dp1_z1", "tp2_dp2_z2", "tp2_dp1_z3", "tp2_dp1_z1_fused"}
WHY_NOT = {"tp2_dp1_z1_avg": "averaged", "tp2_dp1_z1_swiglu": "vocabulary parameter",
           "pp2_dp1_z1": "pipeline-parallel", "pp2_tp2_z1_patterns": "pipeline-parallel", "autoep_ep2_z2": "AutoEP",
           "tp2_dp1_z2_frozen": "frozen parameters and buffers of parallel sources are not indexed"}


def test_layouts_are_served_whole_or_refused(mnt):
    name, m = mnt
    root = os.path.join(m, "layouts")
    readme = open(os.path.join(root, "README")).read()
    own = readme.split("own layout: ")[1].split()[0]
    assert "merged to TP=1 and PP=1" in readme
    if name not in SERVED:
        assert os.listdir(root) == ["README"], "a target that cannot be served whole is not listed"
        assert not os.path.exists(os.path.join(root, own)), "nor found on lookup"
        assert f"Not listed: {own}: " in readme and WHY_NOT[name] in readme, readme
        assert FIXTURES not in readme and f": {TAG}" in readme, "the tag-relative path, not where SRC lives"
        errors = open(os.path.join(m, ".zeromount", "errors")).read()
        assert f"layouts/{own}: " in errors and WHY_NOT[name] in errors, errors
        return
    for target in (own, "zero1-dp3-fp32", "zero3-dp2-fp32"):
        tag = os.path.join(root, target, TAG)
        for f in os.listdir(tag):
            with open(os.path.join(tag, f), "rb") as fh:  # every file of a served target reads
                assert fh.read(), f


def test_tp1_zero3_fake_keeps_the_step_torch_adamw_needs():
    """A ZeRO-3 fake of a TP source once dropped 'step': AdamW.load_state_dict then step() raised
    KeyError: 'step'. Load every rank's optimizer state into torch's own AdamW and step it."""
    with mount(os.path.join(FIXTURES, "tp2_dp1_z3", "checkpoint")) as m:
        for target, world in (("zero3-dp1-fp32", 1), ("zero3-dp2-fp32", 2)):
            for r in range(world):
                path = os.path.join(m, "layouts", target, TAG, f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
                osd = torch.load(path, weights_only=False)["optimizer_state_dict"]
                flat = [torch.zeros(t.numel(), requires_grad=True) for t in osd["fp32_flat_groups"]]
                inner = osd["optimizer_state_dict"]
                opt = torch.optim.AdamW([{"params": [flat[i] for i in g["params"]]} for g in inner["param_groups"]])
                opt.load_state_dict(inner)
                assert all(float(s["step"]) == 2.0 for s in opt.state.values()), (target, r)
                for t in flat:
                    t.grad = torch.zeros_like(t)
                opt.step()
