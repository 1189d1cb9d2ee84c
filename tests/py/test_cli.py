"""The command line as users run it: inspect (text and JSON), and refusals that name the file,
both from `inspect` and from a mount that must not happen."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
import torch

from conftest import FIXTURE_NAMES, FIXTURES, ZEROMOUNT, mount, mounted_paths, unmount


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
    assert r.returncode != 0 and f"{tmp_path}/missing: mount point: No such file or directory" in r.stderr, r.stderr
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
    # Issue 27, item 9: what a user gets wrong says what, and exits 2.
    r = run(SRC)
    assert r.returncode == 2 and "no MOUNTPOINT" in r.stderr and "Usage" not in r.stderr, r.stderr
    r = run("export", SRC, str(tmp_path / "out"), "--view", "bogus")
    assert r.returncode == 2 and "unknown view 'bogus'" in r.stderr, r.stderr
    src = tmp_path / "ckpt"
    shutil.copytree(SRC, src)
    r = run("export", str(src), str(src / "exported"))
    assert r.returncode == 2 and "never writes" in r.stderr and not (src / "exported").exists(), r.stderr
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


def test_a_relative_log_file_is_the_callers_not_the_daemons(tmp_path):
    """The daemon changes to / when it detaches: `--log-file zm.log` is still the caller's folder's."""
    mnt = tempfile.mkdtemp(dir=str(tmp_path))
    r = subprocess.run([ZEROMOUNT, "--log-file", "zm.log", SRC, mnt], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        os.listdir(mnt)
    finally:
        unmount(mnt)
    # The daemon opens its log when it detaches (its lines may still be buffered as it exits).
    assert (tmp_path / "zm.log").is_file()
    assert not os.path.exists("/zm.log")


def test_inspect_of_a_run_folder_lists_its_checkpoints_and_takes_a_nested_tag():
    run = os.path.join(FIXTURES, "hf", "gpt2_z2", "run")
    r = subprocess.run([ZEROMOUNT, "inspect", run], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "a run folder" in r.stdout and "checkpoint-2  global_step2" in r.stdout and "global_step4" in r.stdout
    js = json.loads(subprocess.run([ZEROMOUNT, "inspect", run, "--json"], capture_output=True, text=True,
                                   check=True).stdout)
    assert js["run_folder"] is True
    assert [(c["folder"], c["tags"], c["latest"]) for c in js["checkpoints"]] == [
        ("checkpoint-2", ["global_step2"], "global_step2"), ("checkpoint-4", ["global_step4"], "global_step4")]
    text = subprocess.run([ZEROMOUNT, "inspect", run, "--tag", "checkpoint-4/global_step4"], capture_output=True,
                          text=True, check=True).stdout
    assert "global_step4" in text.splitlines()[0]
    one = json.loads(subprocess.run([ZEROMOUNT, "inspect", run, "--tag", "checkpoint-2/global_step2", "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    assert one["tag"] == "global_step2" and one["dir"].endswith("checkpoint-2/global_step2")


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


def unmount_lazily(mnt):
    """Unmounts every mount stacked on `mnt` without listing it; True if there was one."""
    made = mnt in mounted_paths()
    for _ in range(10):
        if mnt not in mounted_paths():
            break
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    return made


def refused(mnt, *args):
    """`zeromount *args`, which must not mount on `mnt`. A mount made anyway is unmounted lazily
    and never listed: the first listing of a mount onto its own source hangs for good (issue 20)."""
    try:
        return run(*args)
    finally:
        assert not unmount_lazily(os.path.realpath(mnt)), f"{mnt} was mounted"


OVERLAPS = {
    "the same folder": lambda d, tmp: (d, d, "the mount point is SRC itself"),
    "the same folder through a link": lambda d, tmp: (d, link(tmp / "alias", d), "the mount point is SRC itself"),
    "a mount point inside SRC": lambda d, tmp: (d, mkdir(f"{d}/view"), "the mount point is inside SRC"),
    "SRC inside the mount point": lambda d, tmp: (d, str(tmp), "SRC is inside the mount point"),
}


def link(path, target):
    os.symlink(target, path)
    return str(path)


def mkdir(path):
    os.mkdir(path)
    return path


@pytest.mark.parametrize("how", OVERLAPS)
def test_a_mount_onto_its_own_source_is_refused(tmp_copy, tmp_path, how):
    src, mnt, why = OVERLAPS[how](tmp_copy("z2_ws2_fp32_pg2"), tmp_path)
    r = refused(mnt, src, mnt)
    assert r.returncode == 2 and why in r.stderr and os.path.realpath(src) in r.stderr, r.stderr


def test_a_relative_mount_point_is_checked_like_an_absolute_one(tmp_path):
    import signal
    import time
    name = "mnt-" + tmp_path.name  # unique: it finds this mount's server by its command line
    real = str(tmp_path / name)
    os.mkdir(real)
    zm = lambda m: subprocess.run([ZEROMOUNT, SRC, m], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    try:
        assert zm(name).returncode == 0
        again = zm(name)
        assert again.returncode == 1 and f"{real}: already mounted" in again.stderr, again.stderr
        assert mounted_paths().count(real) == 1, "no second mount on top"
        server = serving_processes(name)[0]
        supervisor = int(open(f"/proc/{server}/stat").read().split(")")[1].split()[1])
        os.kill(supervisor, signal.SIGKILL)  # nobody is left to unmount: the mount is dead
        os.kill(int(server), signal.SIGKILL)
        time.sleep(0.3)
        dead = zm(f"./{name}/")
        assert dead.returncode == 1 and "dead mount" in dead.stderr and f"fusermount3 -u -z {real}" in dead.stderr, \
            dead.stderr
        assert mounted_paths().count(real) == 1, "no mount on top of the dead one"
    finally:
        unmount_lazily(real)


def test_tag_takes_one_value_and_may_come_before_the_folders(tmp_copy):
    d = tmp_copy("z2_ws2_fp32_pg2")
    shutil.copytree(f"{d}/global_step3", f"{d}/global_step4")
    with mount(d, first=["--tag", "global_step4"]) as m:
        names = os.listdir(m)
        assert "global_step4_universal" in names and "global_step3_universal" not in names
    with mount(d, first=["--tag", "global_step3", "--tag", "global_step4"]) as m:
        assert {"global_step3_universal", "global_step4_universal"} <= set(os.listdir(m))


def test_options_that_cannot_work_are_usage_errors(tmp_path):
    (tmp_path / "m").mkdir()
    m = str(tmp_path / "m")
    r = refused(m, SRC, m, "-o", "rw")
    assert r.returncode == 2 and "-o rw" in r.stderr and "read-only" in r.stderr, r.stderr
    r = refused(m, SRC, m, "-o", "layouts=zero3-dp0-fp32")
    assert r.returncode == 2 and "not a layout name" in r.stderr and "zero{1,2,3}-dp<W>" in r.stderr, r.stderr


@pytest.mark.parametrize("name,what", [("latest", "an entry of SRC"), ("notes", "an entry of SRC"),
                                       ("global_step3_universal", "a made-up universal folder"),
                                       ("report.html", "a name the view makes up")])
def test_layouts_dir_that_is_taken_is_refused(tmp_copy, tmp_path, name, what):
    d = tmp_copy("z2_ws2_fp32_pg2")
    os.mkdir(f"{d}/notes")
    m = str(tmp_path / "m")
    os.mkdir(m)
    r = refused(m, d, m, "-o", f"layouts_dir={name}")
    assert r.returncode == 2 and f"-o layouts_dir: '{name}'" in r.stderr and what in r.stderr, r.stderr
    if what.startswith("a made-up"):
        assert "a real entry" not in r.stderr, "no false warning about a real entry"


def test_a_non_empty_mount_point_is_named_and_still_mounted(tmp_path):
    for d in ("full", "empty"):
        (tmp_path / d).mkdir()
    (tmp_path / "full" / "mine.txt").write_text("x")
    for d in ("full", "empty"):
        r = run(SRC, str(tmp_path / d))
        try:
            assert r.returncode == 0, r.stderr
            named = [l for l in r.stderr.splitlines() if "not empty" in l]
            if d == "full":
                assert len(named) == 1 and f"{tmp_path}/full" in named[0] and "1 entry" in named[0], r.stderr
            else:
                assert named == [], r.stderr
        finally:
            subprocess.run(["fusermount3", "-u", str(tmp_path / d)], capture_output=True)
    assert (tmp_path / "full" / "mine.txt").read_text() == "x"


def test_inspect_and_dump_say_what_is_wrong(tmp_path):
    r = run("inspect", SRC, "--tag", "nope")
    assert r.returncode == 1 and "--tag nope: no such tag folder" in r.stderr and "global_step3" in r.stderr, r.stderr
    assert "filesystem error" not in r.stderr
    st = tmp_path / "model.safetensors"
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    st.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    r = run("dump", str(st))
    assert r.returncode == 1 and f"{st}: a safetensors file, not a torch.save (.pt) file" in r.stderr, r.stderr


def test_key_level_errors_name_the_full_path(tmp_copy):
    d = tmp_copy("z2_ws2_fp32_pg2")
    path = f"{d}/global_step3/mp_rank_00_model_states.pt"
    sd = torch.load(path, weights_only=False)
    del sd["param_shapes"]
    torch.save(sd, path)
    r = run("inspect", d)
    assert r.returncode == 1 and f"{path}: key 'param_shapes': missing" in r.stderr, r.stderr


def test_inspect_layout_json_holds_the_partition_table():
    params = {p["name"]: p["numel"] for p in json.loads(run("inspect", SRC, "--json").stdout)["params"]}
    W = 4
    r = run("inspect", SRC, "--layout", f"zero3-dp{W}-fp32", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["layout"] == "zero3-dp4-fp32" and j["source_layout"] == "zero2-dp2-fp32" and j["dp"] == W
    assert j["ranks_shown"] == [0, 1, 2, 3] and j["groups"] == [] and j["params"] == len(params)
    seen = {}
    for sg in j["sub_groups"]:
        for rank in sg["ranks"]:
            held = 0
            for h in rank["holds"]:
                part = -(-params[h["name"]] // W)  # ZeRO-3: ceil(n / W) elements per rank, the last one short
                assert h["from"] == rank["rank"] * part and h["numel"] == min(part, params[h["name"]] - h["from"])
                seen[h["name"]] = seen.get(h["name"], 0) + h["numel"]
                held += h["numel"]
            assert rank["flat"] == sg["numel"] and rank["padding"] == sg["numel"] - held
    assert seen == params, "every element of every parameter on exactly one rank"
    z2 = json.loads(run("inspect", SRC, "--layout", "zero2-dp3-fp32", "--json").stdout)
    for g in z2["groups"]:
        assert g["padded"] == -(-g["numel"] // 6) * 6 and g["partition"] == g["padded"] // 3  # 2W alignment
        assert sum(r["valid"] for r in g["ranks"]) == g["numel"]
    big = json.loads(run("inspect", SRC, "--layout", "zero3-dp65536-bf16", "--json").stdout)
    assert big["ranks_shown"] == [0, 1, 2, 3, 65532, 65533, 65534, 65535]


@pytest.mark.skipif(os.geteuid() != 0, reason="runs zeromount as a second user: needs root")
def test_a_source_that_cannot_be_listed_is_refused(tmp_path):
    from conftest import TEST_ROOT
    from test_field import USER, second_user
    user = second_user()
    os.chmod(TEST_ROOT, 0o755)
    home = tempfile.mkdtemp(dir=TEST_ROOT)
    os.chmod(home, 0o755)
    src, mnt = os.path.join(home, "ckpt"), os.path.join(home, "m")
    shutil.copytree(SRC, src)
    os.chmod(src, 0)  # its owner, root, lets nobody list it
    os.mkdir(mnt)
    os.chown(mnt, user.pw_uid, user.pw_gid)
    dev_mode = os.stat("/dev/fuse").st_mode & 0o777
    os.chmod("/dev/fuse", 0o666)  # so that only the refusal can stop this mount
    try:
        r = subprocess.run(["runuser", "-u", USER, "--", ZEROMOUNT, src, mnt], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, XDG_CACHE_HOME=os.path.join(home, "cache")))
    finally:
        os.chmod("/dev/fuse", dev_mode)
        made = unmount_lazily(mnt)
        os.chmod(src, 0o755)
    assert not made and r.returncode == 1 and f"{src}: cannot list: Permission denied" in r.stderr, r.stderr
    r = refused(mnt, os.path.join(src, "latest"), mnt)  # a file
    assert r.returncode == 1 and "not a directory" in r.stderr, r.stderr


def test_a_relative_log_file_is_the_callers(tmp_path):
    """Issue 27, item 5: the daemon changes to /, so --log-file is made absolute before it forks."""
    mnt = tmp_path / "m"
    mnt.mkdir()
    r = subprocess.run([ZEROMOUNT, SRC, str(mnt), "--log-file", "zm.log"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        assert os.listdir(mnt)
    finally:
        unmount(str(mnt))
    assert (tmp_path / "zm.log").exists() and not os.path.exists("/zm.log")


def test_fuse_options_are_checked_before_indexing(tmp_path):
    """Issue 27, item 9: an option libfuse refuses is a usage error (exit 2) on one line, and
    max_read, which zeromount sets itself, is refused with why."""
    (tmp_path / "m").mkdir()
    m = str(tmp_path / "m")
    r = refused(m, SRC, m, "-o", "bogus_option")
    assert r.returncode == 2 and "bogus_option" in r.stderr, r.stderr
    assert len([x for x in r.stderr.splitlines() if "zeromount:" in x]) == 1, r.stderr
    r = refused(m, SRC, m, "-o", "max_read=4096")
    assert r.returncode == 2 and "max_read" in r.stderr and "Connection refused" not in r.stderr, r.stderr


def test_a_run_folder_mount_says_what_it_is(tmp_path):
    mnt = tmp_path / "m"
    mnt.mkdir()
    log = tmp_path / "zm.log"
    run_folder = os.path.join(FIXTURES, "hf", "gpt2_z2", "run")
    p = subprocess.Popen([ZEROMOUNT, run_folder, str(mnt), "-f"], stderr=open(log, "w"))
    try:
        for _ in range(100):
            if "mounted" in log.read_text():
                break
            time.sleep(0.05)
        text = log.read_text()
        assert "a folder of 2 checkpoint or run folder(s), each filled when first used" in text, text
        assert "0 tag(s)" not in text
    finally:
        unmount(str(mnt))
        p.wait(timeout=30)


def test_no_index_cache_neither_reads_nor_writes_the_cache(tmp_path, monkeypatch):
    """--no-index-cache (issue 40): what ZEROMOUNT_NO_INDEX_CACHE=1 did, as a flag."""
    src = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ZEROMOUNT_NO_INDEX_CACHE", raising=False)
    with mount(src, "--no-index-cache") as m:
        assert "global_step3_universal" in os.listdir(m)
    assert not (tmp_path / "cache" / "zeromount").exists() or not os.listdir(tmp_path / "cache" / "zeromount")
    with mount(src) as m:
        assert "global_step3_universal" in os.listdir(m)
    assert os.listdir(tmp_path / "cache" / "zeromount"), "without the flag the index is cached"
