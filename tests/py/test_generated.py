"""Layouts the W=2 fixtures cannot show (issue 3): other world sizes, many sub-groups and groups,
ranks that hold only padding, frozen parameters, two tags in one folder. tests/tools/gen_ckpt.py writes
DeepSpeed-shaped checkpoints plus the full tensors they were cut from; the mount must give back
exactly those tensors."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from conftest import FIXTURES, ZEROMOUNT, mount
from test_browse import read_safetensors

GEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "tools", "gen_ckpt.py")

CASES = {
    "z1_w3": ["--stage", "1", "--dp", "3", "--params", "9", "--groups", "3"],
    "z2_w8_padding_ranks": ["--stage", "2", "--dp", "8", "--sizes", "3,5x2,1,7,2x2", "--groups", "2", "--frozen", "1"],
    "z3_w4_subgroups": ["--stage", "3", "--dp", "4", "--params", "14", "--groups", "3", "--sub-group-size", "300", "--frozen", "2"],
    "z3_w8_tiny": ["--stage", "3", "--dp", "8", "--sizes", "9,1,5x3,2", "--groups", "1", "--sub-group-size", "4"],
    "z3_w64": ["--stage", "3", "--dp", "64", "--params", "30", "--numel-max", "300"],
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    out = {}
    for name, args in CASES.items():
        subprocess.run(["/usr/bin/python3", GEN, str(root / name), *args, "--expected", str(root / (name + ".expected"))],
                       check=True, capture_output=True)
        out[name] = (str(root / name), str(root / (name + ".expected")))
    return out


@pytest.mark.parametrize("case", CASES)
def test_mount_gives_back_the_generated_tensors(generated, case):
    ckpt, expected = generated[case]
    manifest = json.load(open(os.path.join(expected, "manifest.json")))
    with mount(ckpt) as m:
        tag = open(os.path.join(m, "latest")).read()
        u = os.path.join(m, f"{tag}_universal", "zero")
        for p in manifest["params"]:
            for state in ("fp32", "exp_avg", "exp_avg_sq"):
                want = np.load(os.path.join(expected, p["name"], f"{state}.npy"))
                got = torch.load(os.path.join(u, p["name"], f"{state}.pt"), weights_only=True)["param"]
                assert list(got.shape) == list(want.shape) and np.array_equal(got.numpy(), want), (p["name"], state)
                assert np.array_equal(np.load(os.path.join(m, f"{tag}_params", p["name"], f"{state}.npy"), mmap_mode="r"), want)
            assert torch.load(os.path.join(u, p["name"], "step.pt"), weights_only=True).item() == manifest["step"]
        st = read_safetensors(os.path.join(m, f"{tag}_fp32", "model.safetensors"))
        for p in manifest["params"] + manifest.get("frozen", []):
            assert np.array_equal(st[p["name"]], np.load(os.path.join(expected, p["name"], "fp32.npy"))), p["name"]
        osd = torch.load(os.path.join(u, "optimizer_state.pt"), weights_only=False)
        assert len(osd["param_groups"]) == len(manifest["param_groups"])


def test_two_tags_and_latest(generated, tmp_path):
    ckpt, _ = generated["z3_w4_subgroups"]
    both = tmp_path / "both"
    shutil.copytree(ckpt, both)
    other = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint", "global_step3")
    shutil.copytree(other, both / "global_step3_from_fixture")
    with mount(str(both)) as m:
        names = set(os.listdir(m))
        assert {"global_step3_universal", "global_step3_from_fixture_universal"} <= names
        assert open(os.path.join(m, "latest_universal")).read() == "global_step3_universal"
        r = subprocess.run([ZEROMOUNT, "inspect", str(both), "--tag", "global_step3_from_fixture", "--json"],
                           capture_output=True, text=True, check=True)
        assert json.loads(r.stdout)["stage"] == 2


def test_real_universal_folder_wins(tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), src)
    shutil.copytree(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "ds_to_universal", "global_step3_universal"),
                    src / "global_step3_universal")
    with mount(str(src)) as m:
        # The real one is shown as is: DeepSpeed's own output, byte for byte.
        real = src / "global_step3_universal" / "zero" / "fc1.weight" / "fp32.pt"
        assert open(os.path.join(m, "global_step3_universal", "zero", "fc1.weight", "fp32.pt"), "rb").read() == real.read_bytes()


def test_bare_zero3_tensors_option():
    with mount(os.path.join(FIXTURES, "z3_ws2_fp32_pg2", "checkpoint"), "--bare-zero3-tensors") as m:
        t = torch.load(os.path.join(m, "global_step3_universal", "zero", "fc1.weight", "fp32.pt"), weights_only=True)
        assert isinstance(t, torch.Tensor) and list(t.shape) == [30, 12]
