"""Sources that change, daemons that die, many readers at once (issue 6), through real mounts."""
import errno
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
import torch

from conftest import FIXTURES, ZEROMOUNT, mount, mounted_paths, run_in_threads

TAG = "global_step3"
KILLS = int(os.environ.get("ZM_KILLS", "25"))  # 500+ by hand: ZM_KILLS=500 pytest -k kill


def server_pid(mnt):
    """The serving process (comm 'zm-serve') of a mount; its parent is the supervisor."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if comm == "zm-serve" and mnt.encode() in args:
            return int(pid)
    raise AssertionError(f"no server process for {mnt}")


def wait_unmounted(mnt, seconds=5.0):
    end = time.time() + seconds
    while time.time() < end:
        if mnt not in mounted_paths():
            return True
        time.sleep(0.005)
    return False


def busy(m):
    try:
        for _ in range(50):
            os.listdir(m)
    except OSError:
        pass  # the server is being killed under us


def test_kill_9_never_leaves_a_stuck_mount():
    src = os.path.join(FIXTURES, "z3_ws2_fp32_pg2", "checkpoint")
    stuck = 0
    for k in range(KILLS):
        with mount(src) as m:
            if k % 2:  # half the time, with requests in flight
                threading.Thread(target=busy, args=(m,), daemon=True).start()
            os.kill(server_pid(m), signal.SIGKILL)
            if not wait_unmounted(m):
                stuck += 1
            os.stat(m)  # no "Transport endpoint is not connected"
    assert stuck == 0, f"{stuck} of {KILLS} kills left the mount behind"


@pytest.mark.parametrize("who", ["server", "supervisor"])
def test_sigterm_unmounts_cleanly(who):
    with mount(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")) as m:
        pid = server_pid(m)
        if who == "supervisor":
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        os.kill(pid, signal.SIGTERM)
        assert wait_unmounted(m)


def universal_files(m):
    return [os.path.join(d, f) for d, _, fs in os.walk(f"{m}/{TAG}_universal/zero") for f in fs]


CHANGES = {
    "overwritten in place": lambda p: open(p, "r+b").write(b"\0" * 64),
    "truncated": lambda p: os.truncate(p, os.path.getsize(p) // 2),
    "replaced by rename": lambda p: (shutil.copy(p, p + ".new"), os.rename(p + ".new", p)),
}


@pytest.mark.parametrize("change", CHANGES)
def test_changed_shard_fails_reads_instead_of_mixing(tmp_copy, change):
    d = tmp_copy("z2_ws2_fp32_pg2")
    shard = f"{d}/{TAG}/zero_pp_rank_1_mp_rank_00_optim_states.pt"
    with mount(d) as m:
        before = {}
        for p in universal_files(m)[:5]:  # read some now: the page cache may keep serving these
            with open(p, "rb") as f:
                before[p] = f.read()
        time.sleep(0.01)
        CHANGES[change](shard)
        time.sleep(0.15)  # the path is re-checked at most every 100 ms
        failures = 0
        for p in universal_files(m):
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except OSError as e:
                assert e.errno in (errno.ESTALE, errno.EIO), e
                failures += 1
                continue
            if p in before:
                assert data == before[p], "bytes changed under a reader"
        assert failures > 0, "reads of the changed shard must fail"


def test_sixteen_readers_random_ranges():
    with mount(os.path.join(FIXTURES, "z3_ws2_fp32_pg2_sg200", "checkpoint")) as m:
        # .zeromount/stats counts these very reads: the one file whose bytes change by design.
        files = [os.path.join(d, f) for d, _, fs in os.walk(m) for f in fs
                 if not (f == "stats" and d.endswith("/.zeromount"))]
        expected = {}
        for p in files:
            with open(p, "rb") as f:
                expected[p] = f.read()
        mismatches, reads = [], [0] * 16
        deadline = time.time() + float(os.environ.get("ZM_STRESS_SECONDS", "5"))

        def reader(k):
            rng = random.Random(k)
            while time.time() < deadline:
                p = rng.choice(files)
                fd = os.open(p, os.O_RDONLY)
                try:
                    for _ in range(20):
                        off = rng.randrange(len(expected[p]) + 1)
                        ln = rng.randrange(1, 200000)
                        if os.pread(fd, ln, off) != expected[p][off:off + ln]:
                            mismatches.append((p, off, ln))
                        reads[k] += 1
                finally:
                    os.close(fd)

        errors = run_in_threads(reader, 16) + mismatches
        assert not errors, errors[:5]
        assert sum(reads) > 1000
        print(f"16 readers: {sum(reads)} random reads, all equal")


def test_missing_shard_after_mount_fails_reads(tmp_copy):
    d = tmp_copy("z3_ws2_fp32_pg2")
    with mount(d) as m:
        os.remove(f"{d}/{TAG}/zero_pp_rank_0_mp_rank_00_optim_states.pt")
        time.sleep(0.15)
        with pytest.raises(OSError) as e:
            torch.load(f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt", weights_only=True)
        assert e.value.errno in (errno.ESTALE, errno.EIO)


def test_a_link_loop_in_a_tag_folder_stays_a_link(tmp_copy):
    d = tmp_copy("z2_ws2_fp32_pg2")
    os.symlink("loop", f"{d}/{TAG}/loop")
    os.symlink("b", f"{d}/{TAG}/a")
    os.symlink("a", f"{d}/{TAG}/b")
    with mount(d) as m:
        assert [os.readlink(f"{m}/{TAG}/{n}") for n in ("loop", "a", "b")] == ["loop", "b", "a"]
        assert f"{TAG}_universal" in os.listdir(m)
        assert open(f"{m}/.zeromount/errors").read() == ""
    # Under a name DeepSpeed writes, a loop refuses that tag alone, and says why.
    shutil.copytree(f"{d}/{TAG}", f"{d}/global_step4", symlinks=True)
    rank2 = f"{d}/global_step4/zero_pp_rank_2_mp_rank_00_optim_states.pt"
    os.symlink(os.path.basename(rank2), rank2)
    with mount(d) as m:
        names = os.listdir(m)
        assert f"{TAG}_universal" in names and "global_step4_universal" not in names
        errors = open(f"{m}/.zeromount/errors").read()
        in_mount = os.path.relpath(rank2, d)  # errors name files by their path in the mount
        assert errors == f"global_step4: {in_mount}: cannot be followed: Too many levels of symbolic links\n", errors
    r = subprocess.run([ZEROMOUNT, "inspect", d, "--tag", "global_step4"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"{rank2}: cannot be followed" in r.stderr and "filesystem error" not in r.stderr, \
        r.stderr
