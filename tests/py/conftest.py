"""Shared fixtures for the tests that mount for real and read with Python torch and numpy.

Every mount is unmounted at the end of its test, even when the test fails, and the session ends
with a `fusermount3 -u -z` sweep of anything left under the test root, so that a test that
failed mid-mount never leaves the next one a busy folder."""
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dsstub  # noqa: E402,F401  (stand-ins for DeepSpeed's pickled classes)

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
FIXTURE_NAMES = ["z1_ws2_fp32_pg2", "z2_ws2_fp32_pg2", "z3_ws2_fp32_pg2", "z3_ws2_fp32_pg2_sg200"]
# Real 16-bit runs: BF16_Optimizer, bf16 ZeRO-2/3, fp16 ZeRO-2 with a dynamic loss scaler.
SIXTEEN_BIT = ["z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2", "z3_ws2_bf16_pg2", "z2_ws2_fp16_pg2"]
DP_FIXTURES = FIXTURE_NAMES + SIXTEEN_BIT
BUILD = os.environ.get("ZM_BUILD_DIR", os.path.join(os.path.dirname(os.path.dirname(HERE)), "build"))
ZEROMOUNT = os.environ.get("ZEROMOUNT", os.path.join(BUILD, "zeromount"))
PT_RESAVE = os.environ.get("PT_RESAVE", os.path.join(BUILD, "tests", "pt_resave"))
TEST_ROOT = tempfile.mkdtemp(prefix="zm-mounts-")
# The index cache of every zeromount these tests start goes to a scratch folder, never ~/.cache.
os.environ.setdefault("XDG_CACHE_HOME", os.path.join(TEST_ROOT, "xdg-cache"))


def tree_hash(root):
    """Hash of every file's path, mode, size and bytes below root."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, root)} {st.st_mode} {st.st_size} {st.st_mtime_ns}\n".encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def mounted_paths():
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f]


def unmount(mnt):
    if mnt not in mounted_paths():
        return
    r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
    if r.returncode != 0:
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    for _ in range(100):
        if mnt not in mounted_paths():
            return
        time.sleep(0.05)


@contextlib.contextmanager
def mount(src, *extra, expect_fail=False, first=()):
    """Mounts src on a fresh folder: `zeromount *first SRC MNT *extra`."""
    mnt = tempfile.mkdtemp(dir=TEST_ROOT)
    r = subprocess.run([ZEROMOUNT, *first, src, mnt, *extra], capture_output=True, text=True, timeout=120)
    if expect_fail:
        assert r.returncode != 0, "mount should have been refused"
        assert mnt not in mounted_paths()
        yield r
        return
    assert r.returncode == 0, r.stderr
    try:
        yield mnt
    finally:
        unmount(mnt)


def run_in_threads(target, n):
    """Runs target(k) for k in 0..n-1 in n threads; returns the exceptions they raised."""
    import threading
    errors = []

    def guarded(k):
        try:
            target(k)
        except Exception as e:  # reported to the caller
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


# Under CI=true a skipped test fails the run, unless it is listed here with the reason CI skips it.
EXPECTED_SKIPS = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and os.environ.get("CI") == "true" and item.nodeid not in EXPECTED_SKIPS:
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true but not listed in conftest.EXPECTED_SKIPS: {rep.longrepr}"


@pytest.fixture(scope="session", autouse=True)
def source_never_written():
    """The fixtures are hashed before and after the whole session: nothing may change them."""
    before = tree_hash(FIXTURES)
    yield
    for m in mounted_paths():
        if m.startswith(TEST_ROOT):
            subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)
    shutil.rmtree(TEST_ROOT, ignore_errors=True)
    assert tree_hash(FIXTURES) == before, "the source tree was modified"


@pytest.fixture(scope="module", params=DP_FIXTURES)
def mnt(request):
    """Each data-parallel fixture's checkpoint folder mounted, once per module: (name, mount point)."""
    with mount(os.path.join(FIXTURES, request.param, "checkpoint")) as m:
        yield request.param, m


def live_state(name):
    """The engine's own state when the fixture was saved (meta/live_state.pt): the ground truth."""
    import torch
    return torch.load(os.path.join(FIXTURES, name, "meta", "live_state.pt"), weights_only=False)


@pytest.fixture
def tmp_copy(tmp_path):
    """A writable copy of one fixture's checkpoint, for breaking."""
    def make(name):
        dst = tmp_path / name
        shutil.copytree(os.path.join(FIXTURES, name, "checkpoint"), dst)
        return str(dst)
    return make
