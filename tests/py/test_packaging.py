"""mount(8) integration (issue 4): the mount.fuse.zeromount helper, and in CI the .deb that
installs it, with `mount -t fuse.zeromount` and an fstab line."""
import os
import shutil
import subprocess

import pytest

from conftest import FIXTURES, TEST_ROOT, ZEROMOUNT, mounted_paths, unmount

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(REPO, "mount", "mount.fuse.zeromount")
SRC = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")


def fresh_mountpoint(name):
    m = os.path.join(TEST_ROOT, name)
    os.makedirs(m, exist_ok=True)
    return m


def test_helper_drops_mount8_options(tmp_path):
    """mount(8)-only options (rw above all: the view is read-only) never reach the daemon."""
    record = tmp_path / "args"
    fake = tmp_path / "fake-zeromount"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    fake.chmod(0o755)
    opts = "rw,nofail,noauto,_netdev,x-systemd.automount,default_permissions,allow_other,comment=x"
    r = subprocess.run([HELPER, SRC, "/mnt/x", "-o", opts], env=dict(os.environ, ZEROMOUNT=str(fake)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert record.read_text().split("\n")[:-1] == [SRC, "/mnt/x", "-o", "default_permissions,allow_other"]
    r = subprocess.run([HELPER, SRC, "/mnt/x", "-o", "ro,nofail"], env=dict(os.environ, ZEROMOUNT=str(fake)),
                       capture_output=True, text=True, timeout=60)
    assert record.read_text().split("\n")[:-1] == [SRC, "/mnt/x"]


def test_helper_mounts_for_real():
    m = fresh_mountpoint("helper")
    env = dict(os.environ, ZEROMOUNT=ZEROMOUNT)
    r = subprocess.run([HELPER, SRC, m, "-o", "rw,nofail,noauto,_netdev,x-systemd.automount,default_permissions"],
                       env=env, capture_output=True, text=True, timeout=60)
    try:
        assert r.returncode == 0, r.stderr
        assert m in mounted_paths()
        assert open(os.path.join(m, "latest_universal")).read() == "global_step3_universal"
    finally:
        unmount(m)


@pytest.mark.skipif(os.environ.get("CI") != "true" or os.geteuid() != 0,
                    reason="installs a package: CI only (set CI=true as root to run)")
def test_deb_mount_t_and_fstab(tmp_path):
    build = os.path.dirname(ZEROMOUNT)
    subprocess.run(["cpack", "-G", "DEB"], cwd=build, check=True, capture_output=True)
    version = subprocess.run([ZEROMOUNT, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    debs = [f for f in os.listdir(build) if f.startswith(f"zeromount_{version}_") and f.endswith(".deb")]
    assert len(debs) == 1, f"one package for version {version}: {debs}"
    subprocess.run(["dpkg", "-i", os.path.join(build, debs[0])], check=True, capture_output=True)
    try:
        assert shutil.which("zeromount") == "/usr/bin/zeromount"
        m = fresh_mountpoint("mount-t")
        subprocess.run(["mount", "-t", "fuse.zeromount", SRC, m], check=True, timeout=60)
        try:
            assert os.path.exists(os.path.join(m, "global_step3_universal", "zero", "optimizer_state.pt"))
        finally:
            unmount(m)
        fstab = tmp_path / "fstab"
        m2 = fresh_mountpoint("fstab")
        fstab.write_text(f"{SRC} {m2} fuse.zeromount ro,nofail 0 0\n")
        subprocess.run(["mount", "-T", str(fstab), m2], check=True, timeout=60)
        try:
            assert os.listdir(os.path.join(m2, "global_step3_universal"))
        finally:
            unmount(m2)
    finally:
        r = subprocess.run(["dpkg", "-r", "zeromount"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists("/usr/bin/zeromount") and not os.path.exists("/sbin/mount.fuse.zeromount")
