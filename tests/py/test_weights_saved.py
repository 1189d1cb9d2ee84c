"""Weights folders in the layout transformers 5's save_pretrained writes (issue 43): a run's config.json
chooses the entry of transformers' conversion table, and <T>_fp32/ and <T>_bf16/ hold the saved names
and shapes (Mixtral's block_sparse_moe.experts.N.w1/w3/w2, Qwen3-MoE's mlp.experts.N.gate/up/down_proj)
cut from the run-time packed experts. Synthetic runs (tests/tools/gen_ckpt.py --arch mixtral_small |
qwen3moe_small: transformers 5's run-time names); the expected saved tensors are sliced here with
numpy from gen_ckpt's ground truth, independently of the C++ interpreter."""
import json
import math
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES, mount
from test_browse import read_safetensors

GEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "tools",
                   "gen_ckpt.py")
TAG = "global_step3"
FAMILIES = {  # arch: (model_type, architectures, gate/up/down names of expert e, router's saved name)
    "mixtral_small": ("mixtral", "MixtralForCausalLM",
                      ("block_sparse_moe.experts.{}.w1.weight", "block_sparse_moe.experts.{}.w3.weight",
                       "block_sparse_moe.experts.{}.w2.weight"), "block_sparse_moe.gate.weight"),
    "qwen3moe_small": ("qwen3_moe", "Qwen3MoeForCausalLM",
                       ("mlp.experts.{}.gate_proj.weight", "mlp.experts.{}.up_proj.weight",
                        "mlp.experts.{}.down_proj.weight"), "mlp.gate.weight"),
}


def make_run(root, arch, model_type=None):
    src, exp = root / arch, root / (arch + ".expected")
    subprocess.run(["/usr/bin/python3", GEN, str(src), "--stage", "2", "--dp", "2", "--arch", arch, "--expected",
                    str(exp)], check=True, capture_output=True)
    mt, cls = FAMILIES[arch][:2]
    (src / "config.json").write_text(json.dumps({"model_type": model_type or mt, "architectures": [cls]}))
    return src, exp


def expected_saved(arch, runtime):
    """save_pretrained's tensors from the run-time ones, by numpy slicing."""
    gate_n, up_n, down_n = FAMILIES[arch][2]
    router = FAMILIES[arch][3]
    out = {}
    for name, a in runtime.items():
        layer, _, rest = name.partition(".mlp.")
        if rest == "experts.gate_up_proj":
            f = a.shape[1] // 2
            for e in range(a.shape[0]):
                out[layer + "." + gate_n.format(e)] = a[e, :f, :]
                out[layer + "." + up_n.format(e)] = a[e, f:, :]
        elif rest == "experts.down_proj":
            for e in range(a.shape[0]):
                out[layer + "." + down_n.format(e)] = a[e]
        elif rest == "gate.weight":
            out[layer + "." + router] = a
        else:
            out[name] = a
    return out


@pytest.mark.parametrize("arch", sorted(FAMILIES))
def test_saved_layout_equals_numpy_slices(tmp_path, arch):
    src, exp = make_run(tmp_path, arch)
    manifest = json.loads((exp / "manifest.json").read_text())
    truth = {p["name"]: np.load(exp / p["name"] / "fp32.npy") for p in manifest["params"]}
    want = expected_saved(arch, truth)
    with mount(str(src)) as mnt, mount(str(src), "-o", "weights_names=runtime") as rt:
        got = read_safetensors(os.path.join(mnt, TAG + "_fp32", "model.safetensors"))
        assert sorted(got) == sorted(want)
        for k, a in want.items():
            assert got[k].dtype == np.float32 and got[k].shape == a.shape, k
            assert got[k].tobytes() == np.ascontiguousarray(a).tobytes(), k
        # 21 run-time tensors (two packed expert pairs per layer) become 41 (Mixtral) or 45 (Qwen3: q/k norms)
        runtime = read_safetensors(os.path.join(rt, TAG + "_fp32", "model.safetensors"))
        assert sorted(runtime) == sorted(truth)
        assert len(got) == len(runtime) + 2 * (3 * 4 - 2)
        # the training-precision folder is cut the same way from the run-time bf16 module weights
        got16 = read_safetensors(os.path.join(mnt, TAG + "_bf16", "model.safetensors"))
        want16 = expected_saved(arch, read_safetensors(os.path.join(rt, TAG + "_bf16", "model.safetensors")))
        assert sorted(got16) == sorted(want16)
        for k, a in want16.items():
            assert got16[k].shape == a.shape and got16[k].tobytes() == np.ascontiguousarray(a).tobytes(), k
        assert not os.path.exists(os.path.join(mnt, TAG + "_fp32", "README.md"))
        assert os.path.exists(os.path.join(rt, TAG + "_fp32", "README.md"))


def test_sharded_saved_layout_index_names_saved_tensors(tmp_path):
    src, _ = make_run(tmp_path, "mixtral_small")
    with mount(str(src), "-o", "max_shard_size=200KB") as mnt:
        d = os.path.join(mnt, TAG + "_fp32")
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        names = set()
        for f in set(index["weight_map"].values()):
            names |= set(read_safetensors(os.path.join(d, f)))
        assert names == set(index["weight_map"]) and len(names) == 41
        assert "model.layers.1.block_sparse_moe.experts.3.w2.weight" in names


def test_type_outside_the_vocabulary_keeps_runtime_names_and_says_why(tmp_path):
    # qwen3_vl_moe's entry transposes experts only when the live model's shapes ask (check_dims)
    src, exp = make_run(tmp_path, "qwen3moe_small", model_type="qwen3_vl_moe")
    manifest = json.loads((exp / "manifest.json").read_text())
    with mount(str(src)) as mnt:
        d = os.path.join(mnt, TAG + "_fp32")
        assert sorted(read_safetensors(os.path.join(d, "model.safetensors"))) == sorted(
            p["name"] for p in manifest["params"])
        assert "check_dims" in open(os.path.join(d, "README.md")).read()


def test_unknown_type_and_no_config_keep_runtime_names(tmp_path):
    src, exp = make_run(tmp_path, "mixtral_small", model_type="not_a_model")
    names = sorted(p["name"] for p in json.loads((exp / "manifest.json").read_text())["params"])
    with mount(str(src)) as mnt:
        assert sorted(read_safetensors(os.path.join(mnt, TAG + "_fp32", "model.safetensors"))) == names
        assert not os.path.exists(os.path.join(mnt, TAG + "_fp32", "README.md"))
    (src / "config.json").unlink()
    with mount(str(src)) as mnt:
        assert sorted(read_safetensors(os.path.join(mnt, TAG + "_fp32", "model.safetensors"))) == names
        # the other views keep run-time names whatever the table says
        assert any("experts.gate_up_proj" in n for n in os.listdir(os.path.join(mnt, TAG + "_params")))


def test_config_json_link_is_followed_and_fifo_is_not_read(tmp_path):
    # the daemon reads config.json as it reads `latest`: a link through ds::resolve, a regular file only
    src, _ = make_run(tmp_path, "mixtral_small")
    real = tmp_path / "elsewhere.json"
    (src / "config.json").rename(real)
    (src / "config.json").symlink_to(real)
    with mount(str(src)) as mnt:
        names = read_safetensors(os.path.join(mnt, TAG + "_fp32", "model.safetensors"))
        assert "model.layers.0.block_sparse_moe.experts.0.w1.weight" in names
    (src / "config.json").unlink()
    os.mkfifo(src / "config.json")  # an open() of it would block the fill until a writer came
    with mount(str(src)) as mnt:
        names = read_safetensors(os.path.join(mnt, TAG + "_fp32", "model.safetensors"))
        assert "model.layers.0.mlp.experts.gate_up_proj" in names


def safetensors_header(path):
    """Each tensor's dtype and shape as the file's header says them."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in header.items()}


# Real runs of the HF oracle (docs/oracle-results.md, "Weights folders in the saved layout"): a tiny
# Mixtral (ZeRO-2, fp32) and a tiny Qwen3-MoE (ZeRO-2, bf16) trained by the Trainer with DeepSpeed
# under transformers 5.12.1. Their checkpoint-2/model.safetensors is the Trainer's own save_pretrained
# output: the weights folder of the tag beside it must hold the same names, shapes, dtypes and bytes.
@pytest.mark.parametrize("run,folder,runtime_keys", [("mixtral_z2_fp32", "global_step2_fp32", 21),
                                                       ("qwen3_moe_z2_bf16", "global_step2_bf16", 25)])
def test_trainer_moe_runs_equal_the_trainers_own_save(run, folder, runtime_keys):
    ckpt = os.path.join(FIXTURES, "hf_moe", run, "checkpoint-2")
    want_path = os.path.join(ckpt, "model.safetensors")
    with mount(ckpt) as mnt:
        got_path = os.path.join(mnt, folder, "model.safetensors")
        assert safetensors_header(got_path) == safetensors_header(want_path)
        got, want = read_safetensors(got_path), read_safetensors(want_path)
        differ = [k for k in want if got[k].tobytes() != want[k].tobytes()]
        assert not differ, differ
    with mount(ckpt, "-o", "weights_names=runtime") as mnt:
        assert len(safetensors_header(os.path.join(mnt, folder, "model.safetensors"))) == runtime_keys


# The report pages per expert (issue 43): <T>_params/<packed param>/info lists every expert's L2
# norm, read from the run-time packed fp32 masters; numpy computes the same norms from the
# Trainer's own model.safetensors, where every expert is its own tensors (the saved layout), so the
# two share neither file nor layout. The bf16 run's file holds bf16 weights, its masters fp32: equal
# to bf16 rounding. Neither real run is flagged.
@pytest.mark.parametrize("run,saved,rel", [
    ("mixtral_z2_fp32", ("block_sparse_moe.experts.{}.w1.weight", "block_sparse_moe.experts.{}.w3.weight",
                         "block_sparse_moe.experts.{}.w2.weight"), 1e-6),
    ("qwen3_moe_z2_bf16", ("mlp.experts.{}.gate_proj.weight", "mlp.experts.{}.up_proj.weight",
                           "mlp.experts.{}.down_proj.weight"), 4e-3)])
def test_info_lists_each_packed_experts_norm(run, saved, rel):
    import re
    ckpt = os.path.join(FIXTURES, "hf_moe", run, "checkpoint-2")
    def widened(a):  # read_safetensors gives bf16 as its int16 bits: the upper half of a float32
        if a.dtype == np.int16:
            a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return a.astype(np.float64)
    want = {k: widened(v) for k, v in read_safetensors(os.path.join(ckpt, "model.safetensors")).items()}
    line = re.compile(r"expert +(\d+) +L2 norm +(\S+) +RMS +(\S+) +norm-outlier +(\S+)")
    with mount(ckpt) as mnt:
        for layer in (0, 1):
            pre = f"model.layers.{layer}."
            for packed, parts in (("gate_up_proj", saved[:2]), ("down_proj", saved[2:])):
                with open(os.path.join(mnt, "global_step2_params", f"{pre}mlp.experts.{packed}", "info")) as f:
                    rows = line.findall(f.read())
                assert [int(r[0]) for r in rows] == [0, 1, 2, 3], packed
                for e, norm, rms, outlier in rows:
                    tensors = [want[pre + p.format(e)] for p in parts]
                    numel = sum(t.size for t in tensors)
                    expected = math.sqrt(sum(float((t * t).sum()) for t in tensors))
                    assert float(norm) == pytest.approx(expected, rel=rel), (packed, e)
                    assert float(rms) == pytest.approx(expected / math.sqrt(numel), rel=rel), (packed, e)
                    assert outlier == "no", (packed, e)
        with open(os.path.join(mnt, "global_step2_params", "report.html")) as f:
            page = f.read()
        row = page[page.index("<td>norm-outlier</td>"):]
        assert row[:row.index("</tr>")].count('class="g">pass') == 1, row[:300]
        assert page.count("<h2 id=\"experts\">") == 1
