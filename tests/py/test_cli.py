"""The command line as users run it: inspect (text and JSON), and refusals that name the file,
both from `inspect` and from a mount that must not happen."""
import json
import os
import shutil
import subprocess

import pytest
import torch

from conftest import FIXTURE_NAMES, FIXTURES, ZEROMOUNT, mount


def run(*args):
    return subprocess.run([ZEROMOUNT, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_inspect_json(name):
    r = run("inspect", os.path.join(FIXTURES, name, "checkpoint"), "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["stage"] == int(name[1]) and j["dp"] == 2 and j["step"] == 3.0
    assert j["states"] == ["fp32", "exp_avg", "exp_avg_sq"]
    assert [p["name"] for p in j["params"]][:2] == ["embed.weight", "fc1.weight"]
    assert j["totals"]["numel"] == sum(p["numel"] for p in j["params"]) == 2041
    assert {b["name"] for b in j["buffers"]} == {"running_mean"}
    assert len(j["frozen"]) == (0 if name.startswith("z1") else 1)


def test_inspect_text_names_every_param():
    r = run("inspect", os.path.join(FIXTURES, "z3_ws2_fp32_pg2_sg200", "checkpoint"))
    assert r.returncode == 0
    assert "ZeRO-3 (4 sub-groups)" in r.stdout
    for p in ["embed.weight", "fc1.weight", "fc2.weight", "head.weight", "fc1.bias", "norm.weight", "head.bias"]:
        assert f"\n{p} " in r.stdout


def change_shape(tag_dir, model_file, param, new_shape):
    """Rewrites a model-state file with one param_shapes entry changed (model files hold no
    DeepSpeed objects, so torch can re-save them faithfully)."""
    path = os.path.join(tag_dir, model_file)
    sd = torch.load(path, weights_only=False)
    for group in sd["param_shapes"]:
        if param in group:
            group[param] = torch.Size(new_shape)
    torch.save(sd, path)


BREAKS = {
    "rank file removed": lambda d: os.remove(f"{d}/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    "pickle truncated": lambda d: os.truncate(f"{d}/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt", 5000),
    "shape changed": lambda d: change_shape(f"{d}/global_step3", "mp_rank_00_model_states.pt" if os.path.exists(
        f"{d}/global_step3/mp_rank_00_model_states.pt") else "zero_pp_rank_0_mp_rank_00_model_states.pt", "fc1.weight", [31, 12]),
}
NAMED = {"rank file removed": "zero_pp_rank_1_mp_rank_00_optim_states.pt",
         "pickle truncated": "zero_pp_rank_0_mp_rank_00_optim_states.pt",
         "shape changed": "fc1.weight"}


@pytest.mark.parametrize("name", ["z2_ws2_fp32_pg2", "z3_ws2_fp32_pg2_sg200"])
@pytest.mark.parametrize("how", BREAKS)
def test_broken_checkpoints_are_refused_by_name(tmp_copy, name, how):
    d = tmp_copy(name)
    BREAKS[how](d)
    r = run("inspect", d)
    assert r.returncode == 1
    assert NAMED[how] in r.stderr, r.stderr
    # A broken tag never takes the folder down: its real files stay, it gets no made-up folders, and
    # the reason is in .zeromount/errors and the log. Named with --tag, it refuses the mount.
    with mount(d) as m:
        assert "global_step3_universal" not in os.listdir(m) and "global_step3" in os.listdir(m)
        with open(f"{m}/.zeromount/errors") as f:
            errors = f.read()
        assert errors.startswith("global_step3: ") and NAMED[how] in errors, errors
    with mount(d, "--tag", "global_step3", expect_fail=True) as refused:
        assert NAMED[how] in refused.stderr, refused.stderr


def test_one_broken_tag_leaves_the_others_served(tmp_copy):
    d = tmp_copy("z2_ws2_fp32_pg2")
    shutil.copytree(f"{d}/global_step3", f"{d}/global_step4")
    os.truncate(f"{d}/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt", 100)  # a save in progress
    with mount(d) as m:
        names = os.listdir(m)
        assert "global_step3_universal" in names and "global_step4_universal" not in names
        assert "global_step4" in names
        assert open(f"{m}/.zeromount/errors").read().startswith("global_step4: ")
    with mount(d, "--tag", "global_step3") as m:
        assert "global_step4_universal" not in os.listdir(m)
        assert open(f"{m}/.zeromount/errors").read() == ""
    with mount(d, "--tag", "global_step9", expect_fail=True) as refused:
        assert "global_step9" in refused.stderr


def test_mount_point_errors_are_clear(tmp_path):
    r = run(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), str(tmp_path / "missing"))
    assert r.returncode != 0 and "missing" in r.stderr
    r = run(str(tmp_path / "nothing-here"), str(tmp_path))
    assert r.returncode != 0 and "nothing-here" in r.stderr


SRC = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")


def serving_processes(about=""):
    """The zm-serve processes whose command line mentions `about`."""
    out = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and open(f"/proc/{p}/comm").read().strip() == "zm-serve" and \
                    about.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                out.append(p)
        except OSError:
            pass
    return out


def test_usage_errors_exit_2_and_unknown_log_levels_are_refused(tmp_path):
    for bad in (["--bogus"], ["--log-level", "loud", SRC, str(tmp_path)], ["export"]):
        r = run(*bad)
        assert r.returncode == 2, (bad, r.returncode, r.stderr)
    assert "loud" in run("--log-level", "loud", SRC, str(tmp_path)).stderr
    assert run("--version").returncode == 0
    with mount(SRC, "--log-level", "INFO") as m:  # any case of a known level
        assert os.listdir(m)


def test_mount_point_mistakes_leave_nothing_behind(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    r = run(SRC, str(f))
    assert r.returncode == 1 and "not a folder" in r.stderr, r.stderr
    with mount(SRC) as m:
        r = run(SRC, m)
        assert r.returncode == 1 and "already mounted" in r.stderr and "fusermount3 -u" in r.stderr, r.stderr
        assert len([l for l in open("/proc/self/mounts") if f" {m} " in l]) == 1, "no second mount on top"
        assert len(serving_processes(m)) == 1
    assert serving_processes(str(f)) == []


def test_a_dead_mount_is_named_with_its_recovery(tmp_path):
    import signal
    import time
    from conftest import TEST_ROOT
    m = tempfile_dir = os.path.join(TEST_ROOT, "dead")
    os.makedirs(m, exist_ok=True)
    assert run(SRC, m).returncode == 0
    server = serving_processes(m)[0]
    supervisor = int(open(f"/proc/{server}/stat").read().split(")")[1].split()[1])
    os.kill(supervisor, signal.SIGKILL)  # nobody is left to unmount: the mount is dead
    os.kill(int(server), signal.SIGKILL)
    time.sleep(0.3)
    try:
        r = run(SRC, m)
        assert r.returncode == 1 and "dead mount" in r.stderr and "fusermount3 -u -z" in r.stderr, r.stderr
    finally:
        subprocess.run(["fusermount3", "-u", "-z", tempfile_dir], capture_output=True)


def test_log_file_gets_the_daemon_log(tmp_path):
    log = tmp_path / "zm.log"
    with mount(SRC, "--log-file", str(log), "--log-level", "debug") as m:
        open(f"{m}/global_step3_universal/zero/fc1.weight/fp32.pt", "rb").read()
        assert not os.path.exists(f"{m}/nope")
    text = log.read_text()
    assert "lookup /global_step3_universal/zero/fc1.weight: inode" in text, text[-2000:]
    assert "open /global_step3_universal/zero/fc1.weight/fp32.pt" in text, text[-2000:]
    assert "read /global_step3_universal/zero/fc1.weight/fp32.pt" in text and "file " in text
    assert "ENOENT" in text


def test_a_source_without_zero_checkpoint_mounts_with_a_warning(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    m = tmp_path / "m"
    m.mkdir()
    r = run(str(tmp_path / "notes"), str(m))
    try:
        assert r.returncode == 0 and "no ZeRO checkpoint" in r.stderr, r.stderr
    finally:
        subprocess.run(["fusermount3", "-u", str(m)], capture_output=True)


def test_latest_rewritten_after_the_mount_is_never_stale(tmp_copy):
    d = tmp_copy("z2_ws2_fp32_pg2")
    with mount(d) as m:
        before = open(f"{m}/latest").read()
        with open(f"{d}/latest", "w") as f:  # what DeepSpeed does after its next save
            f.write("global_step4")
        assert open(f"{m}/latest").read() == before == "global_step3"
        assert open(f"{m}/latest_universal").read() == "global_step3_universal"
