"""`zeromount export` (issue 7): the same files as the mount, in a real folder, all or nothing."""
import os
import subprocess

import pytest
import torch

from conftest import FIXTURE_NAMES, FIXTURES, ZEROMOUNT
from test_browse import read_safetensors

TAG = "global_step3"


def export(src, out, *args):
    return subprocess.run([ZEROMOUNT, "export", src, str(out), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_universal_export_equals_ds_to_universal(tmp_path, name):
    out = tmp_path / "exported"
    r = export(os.path.join(FIXTURES, name, "checkpoint"), out)
    assert r.returncode == 0, r.stderr
    assert "exported" in r.stdout
    assert (out / "latest_universal").read_text() == f"{TAG}_universal"
    ref = os.path.join(FIXTURES, name, "ds_to_universal", f"{TAG}_universal", "zero")
    for p in os.listdir(ref):
        if not os.path.isdir(os.path.join(ref, p)):
            continue
        for f in os.listdir(os.path.join(ref, p)):
            ours = torch.load(out / f"{TAG}_universal" / "zero" / p / f, weights_only=True)
            theirs = torch.load(os.path.join(ref, p, f), weights_only=True)
            a = ours["param"] if isinstance(ours, dict) else ours
            b = theirs["param"] if isinstance(theirs, dict) else theirs
            assert torch.equal(a.reshape(-1), b.reshape(-1)), (p, f)
    assert not [e for e in os.listdir(tmp_path) if e.startswith(".")], "no temporary folder left"
    u = out / f"{TAG}_universal"
    # One source file under several model-state names is written once and hard-linked.
    assert os.stat(u / "mp_rank_00_model_states.pt").st_ino == os.stat(u / "zero_pp_rank_0_mp_rank_00_model_states.pt").st_ino


def test_fp32_export(tmp_path):
    name = "z3_ws2_fp32_pg2_sg200"
    r = export(os.path.join(FIXTURES, name, "checkpoint"), tmp_path / "o", "--view", "fp32")
    assert r.returncode == 0, r.stderr
    ours = read_safetensors(tmp_path / "o" / f"{TAG}_fp32" / "model.safetensors")
    theirs = read_safetensors(os.path.join(FIXTURES, name, "zero_to_fp32", "model.safetensors"))
    assert set(ours) == set(theirs) and all(ours[k].tobytes() == theirs[k].tobytes() for k in ours)


def test_existing_target_is_refused(tmp_path):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "keep").write_text("x")
    r = export(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), tmp_path / "o")
    assert r.returncode == 1 and "already exists" in r.stderr
    assert os.listdir(tmp_path / "o") == ["keep"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tiny tmpfs to run out of space")
def test_failure_leaves_nothing(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(small)], check=True)
    try:
        r = export(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), small / "o")
        assert r.returncode == 1 and "No space left" in r.stderr, r.stderr
        assert os.listdir(small) == [], "a failed export leaves nothing behind"
    finally:
        subprocess.run(["umount", str(small)])


def test_exported_pt_files_carry_real_crcs(tmp_path):
    import zipfile
    out = tmp_path / "exported"
    assert export(os.path.join(FIXTURES, "z3_ws2_fp32_pg2", "checkpoint"), out).returncode == 0
    checked = 0
    for dirpath, _, files in os.walk(out):
        for f in files:
            if f.endswith(".pt"):
                with zipfile.ZipFile(os.path.join(dirpath, f)) as z:
                    assert z.testzip() is None, f"{dirpath}/{f}: a record's CRC is wrong"
                checked += 1
    assert checked > 27
    assert oct(os.stat(out).st_mode & 0o777) == oct(0o777 & ~current_umask()), "the folder follows the umask"


def current_umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_a_stopped_export_leaves_nothing_and_a_dead_ones_leftovers_go(tmp_path):
    import signal
    import time
    big = tmp_path / "big"
    subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "tests", "tools", "gen_ckpt.py"), str(big), "--stage", "2", "--dp", "2", "--params", "8",
        "--numel-min", "4000000", "--numel-max", "4000000"], check=True, capture_output=True, timeout=300)
    out = tmp_path / "exported"
    # SIGHUP: the ssh session that ran the export closed.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        p = subprocess.Popen([ZEROMOUNT, "export", str(big), str(out), "--view", "all", "--threads", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and not [e for e in os.listdir(tmp_path) if e.startswith(".exported.")]:
            time.sleep(0.005)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert p.returncode != 0 and "interrupted" in err, (sig, err)
        assert sorted(os.listdir(tmp_path)) == ["big"], f"{sig}: no temporary folder and no half export"
    # A dead export's folder (kill -9 leaves it) is removed by the next export to the same place.
    stale = tmp_path / ".exported.zeromount-dead01"
    stale.mkdir()
    (stale / ".zeromount-pid").write_text("999999999\n")
    assert export(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), out).returncode == 0
    assert not stale.exists()


def test_export_layout_takes_a_layout_name_and_no_view(tmp_path):
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    r = export(src, tmp_path / "o", "--layout", "zero3-dp0-fp32")
    assert r.returncode == 2 and "'zero3-dp0-fp32' is not a layout name" in r.stderr, r.stderr
    assert "zero{1,2,3}-dp<W>-{fp32,fp16,bf16}" in r.stderr and "README" not in r.stderr, "the grammar, here"
    r = export(src, tmp_path / "o", "--layout", "zero3-dp4-fp32", "--view", "fp32")
    assert r.returncode == 2 and "--view" in r.stderr and "--layout" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("layout", ["fsdp-dp2", "fsdp-dp3", "torch"])
def test_export_writes_the_torch_layouts_as_the_mount_shows_them(tmp_path, layout):
    """--layout takes every name layouts/ serves (issue 40): the FSDP and plain-Trainer folders too,
    for a container without FUSE. The export holds the mount's files, byte for byte, and the
    weights are DeepSpeed's own zero_to_fp32 output read by an independent reader."""
    import dcp_reader
    from conftest import mount
    name = "z2_ws2_fp32_pg2"
    src = os.path.join(FIXTURES, name, "checkpoint")
    out = tmp_path / "o"
    r = export(src, out, "--layout", layout)
    assert r.returncode == 0, r.stderr
    with mount(src) as m:
        made = f"{m}/layouts/{layout}"
        for root, _, files in os.walk(made):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), made)
                mounted = open(os.path.join(root, f), "rb").read()
                if f.endswith(".pt"):  # an exported .pt has real CRC-32s, the mount's are 0
                    assert (out / rel).stat().st_size == len(mounted), rel
                else:
                    assert (out / rel).read_bytes() == mounted, rel
    theirs = read_safetensors(os.path.join(FIXTURES, name, "zero_to_fp32", "model.safetensors"))
    if layout == "torch":
        ours = read_safetensors(out / "model.safetensors")
        assert all(ours[k].tobytes() == theirs[k].tobytes() for k in theirs)
        osd = torch.load(out / "optimizer.pt", weights_only=False)
        assert set(osd) == {"state", "param_groups"} and len(osd["state"]) == 9
        return
    _, model = dcp_reader.load(str(out / "pytorch_model_fsdp_0"))
    for k, t in theirs.items():
        assert model[f"model.{k}"].numpy().tobytes() == t.tobytes(), k
    _, optim = dcp_reader.load(str(out / "optimizer_0"))
    assert any(k.endswith(".exp_avg_sq") for k in optim)


def test_inspect_layout_lists_a_torch_layouts_files(tmp_path):
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    r = subprocess.run([ZEROMOUNT, "inspect", src, "--layout", "fsdp-dp3", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    j = json.loads(r.stdout)
    assert export(src, tmp_path / "o", "--layout", "fsdp-dp3").returncode == 0
    on_disk = {os.path.relpath(os.path.join(d, f), tmp_path / "o"): os.path.getsize(os.path.join(d, f))
               for d, _, fs in os.walk(tmp_path / "o") for f in fs}
    assert j["layout"] == "fsdp-dp3" and {f["path"]: f["size"] for f in j["files"]} == on_disk
    assert j["bytes"] == sum(on_disk.values())
    text = subprocess.run([ZEROMOUNT, "inspect", src, "--layout", "torch"], capture_output=True, text=True,
                          timeout=120)
    assert text.returncode == 0 and "optimizer.pt" in text.stdout and "model.safetensors" in text.stdout, text.stderr
