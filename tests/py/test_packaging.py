"""mount(8) integration (issue 4): the mount.fuse.zeromount helper, and in CI the .deb that
installs it, with `mount -t fuse.zeromount` and an fstab line; the .deb installed into a clean
Debian 12 root (issue 27 item 11): its dependencies, man page, copyright, changelog, and a mount
served by the installed helper and binary."""
import contextlib
import gzip
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import FIXTURES, TEST_ROOT, ZEROMOUNT, mounted_paths, unmount

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(REPO, "mount", "mount.fuse.zeromount")
SRC = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")


def fresh_mountpoint(name):
    m = os.path.join(TEST_ROOT, name)
    os.makedirs(m, exist_ok=True)
    return m


_deb = []


def build_deb():
    """`cpack -G DEB` in ZEROMOUNT's build folder, once per session: the path of this version's
    package, zeromount_<version>-<revision>_<arch>.deb, as cpack names it."""
    if not _deb:
        build = os.path.dirname(ZEROMOUNT)
        r = subprocess.run(["cpack", "-G", "DEB"], cwd=build, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        made = re.findall(r"package: (\S+\.deb) generated", r.stdout)
        assert len(made) == 1, r.stdout
        version = subprocess.run([ZEROMOUNT, "--version"], capture_output=True, text=True,
                                 check=True).stdout.split()[-1]
        assert os.path.basename(made[0]).startswith(f"zeromount_{version}-"), (made, version)
        _deb.append(made[0])
    return _deb[0]


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
    subprocess.run(["dpkg", "-i", build_deb()], check=True, capture_output=True)
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


# The .deb installed into a clean Debian 12 root ------------------------------------------------------------------

CI_CACHE = os.path.realpath(os.environ.get("ZM_CI_CACHE", "/var/cache/zeromount-ci"))
BASE = os.path.join(CI_CACHE, "bookworm-minbase")  # debootstrap --variant=minbase bookworm, made once
BASE_DONE = BASE + ".done"  # written once BASE is complete: a half-made BASE is made again
ARCHIVES = os.path.join(CI_CACHE, "apt-archives")  # the dependencies' .debs, bound into each root
CHROOT_ENV = ["/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"]
NO_NETWORK = re.compile(r"Failed to fetch|Temporary failure resolving|Could not resolve|Unable to connect|"
                        r"Network is unreachable|Connection timed out|Couldn't download|Could not connect")


def in_root(root, *cmd, timeout=300, check=False):
    r = subprocess.run(["chroot", root, *CHROOT_ENV, *cmd], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"{' '.join(cmd)} in the clean root: {r.stdout}{r.stderr}"
    return r


def host_mirrors():
    """The archive and security URIs this host's apt uses for bookworm (deb822 or one-line sources), so that a
    host behind a local mirror bootstraps from it; deb.debian.org where the host names none."""
    found = {}
    paths = ["/etc/apt/sources.list"]
    with contextlib.suppress(FileNotFoundError):
        paths += sorted(os.path.join("/etc/apt/sources.list.d", f) for f in os.listdir("/etc/apt/sources.list.d"))
    for p in paths:
        with contextlib.suppress(OSError):
            text = open(p).read()
            stanzas = []
            if p.endswith(".sources"):
                for block in re.split(r"\n\s*\n", text):
                    fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", block, re.M))
                    stanzas += [(uri, suite) for uri in fields.get("URIs", "").split()
                                for suite in fields.get("Suites", "").split()]
            else:
                stanzas += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M)
            for uri, suite in stanzas:
                found.setdefault(suite, uri.rstrip("/"))
    return (found.get("bookworm", "http://deb.debian.org/debian"),
            found.get("bookworm-security", "http://deb.debian.org/debian-security"))


def mounts_below(root):
    below = root.rstrip("/") + "/"
    return [m for m in mounted_paths() if m.startswith(below)]


def processes_in(root):
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/root") == root:
                pids.append(int(pid))
    return pids


def release_root(root):
    """Unmounts everything below root and ends what runs in it (only the processes this test started there:
    the daemons), then removes it. Never removes a root with anything still mounted below it."""
    for m in mounts_below(root):
        if m.startswith(os.path.join(root, "mnt")):
            unmount(m)  # fusermount3 -u, else -u -z: the daemon then exits
    deadline = time.time() + 10
    while processes_in(root) and time.time() < deadline:
        time.sleep(0.1)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_in(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.5)
    for m in sorted(mounts_below(root), key=len, reverse=True):
        if subprocess.run(["umount", m], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", m], capture_output=True)
    left = mounts_below(root)
    assert not left, f"still mounted below {root}, so it is left in place: {left}"
    subprocess.run(["rm", "-rf", "--one-file-system", root], check=True, timeout=300)


def bind_system(root):
    subprocess.run(["mount", "--bind", "/dev", os.path.join(root, "dev")], check=True)
    subprocess.run(["mount", "-t", "proc", "proc", os.path.join(root, "proc")], check=True)


def ensure_base():
    """The cached clean root: debootstrap --variant=minbase bookworm, plus man-db (for `man -w`), with apt's lists
    of the host's mirror. Made once (a few minutes; skipped with the reason where there is no network or mirror)."""
    if os.path.isdir(BASE) and os.path.exists(BASE_DONE):
        return
    if not shutil.which("debootstrap"):
        pytest.skip("debootstrap is not installed and no clean root is cached in "
                    f"{CI_CACHE} (apt-get install debootstrap)")
    if os.path.isdir(BASE):
        release_root(BASE)  # an interrupted earlier run
    tmp = os.path.realpath(tempfile.mkdtemp(dir=CI_CACHE, prefix="bootstrap-"))
    os.chmod(tmp, 0o755)
    try:
        mirror, security = host_mirrors()
        r = subprocess.run(["debootstrap", "--variant=minbase", "--include=man-db", "bookworm", tmp, mirror],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            log = ""
            with contextlib.suppress(OSError):
                log = open(os.path.join(tmp, "debootstrap", "debootstrap.log")).read()
            tail = " | ".join((r.stdout + r.stderr + log).strip().splitlines()[-4:])
            pytest.skip(f"debootstrap --variant=minbase bookworm from {mirror} failed (no network or apt mirror "
                        f"reachable?): {tail}")
        with open(os.path.join(tmp, "etc/apt/sources.list"), "w") as f:
            f.write(f"deb {mirror} bookworm main\ndeb {mirror} bookworm-updates main\n"
                    f"deb {security} bookworm-security main\n")
        with open(os.path.join(tmp, "usr/sbin/policy-rc.d"), "w") as f:
            f.write("#!/bin/sh\nexit 101\n")  # no service starts in the root
        os.chmod(os.path.join(tmp, "usr/sbin/policy-rc.d"), 0o755)
        bind_system(tmp)
        r = in_root(tmp, "apt-get", "update", "-qq")
        if r.returncode != 0 or NO_NETWORK.search(r.stdout + r.stderr):
            pytest.skip(f"apt-get update in the clean root failed (no network or apt mirror?): {r.stdout}{r.stderr}")
        in_root(tmp, "apt-get", "clean", check=True)
        for m in sorted(mounts_below(tmp), key=len, reverse=True):
            subprocess.run(["umount", m], check=True)
        os.rename(tmp, BASE)
        open(BASE_DONE, "w").close()
    finally:
        if os.path.isdir(tmp):
            release_root(tmp)


@contextlib.contextmanager
def clean_root():
    """A fresh copy of the cached root, /dev and /proc mounted in it, apt's archive cache bound to ARCHIVES."""
    import fcntl
    os.makedirs(CI_CACHE, exist_ok=True)
    with open(os.path.join(CI_CACHE, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one session at a time makes, copies or uses the cache
        for stale in os.listdir(CI_CACHE):  # a root left by a run that was killed (a ctest timeout)
            if stale.startswith(("root-", "bootstrap-")):
                release_root(os.path.join(CI_CACHE, stale))
        ensure_base()
        root = os.path.realpath(tempfile.mkdtemp(dir=CI_CACHE, prefix="root-"))
        try:
            os.chmod(root, 0o755)
            subprocess.run(["cp", "-a", BASE + "/.", root], check=True, timeout=300)
            os.makedirs(os.path.join(ARCHIVES, "partial"), exist_ok=True)
            subprocess.run(["mount", "--bind", ARCHIVES, os.path.join(root, "var/cache/apt/archives")], check=True)
            bind_system(root)
            yield root
        finally:
            release_root(root)


def fuse_type(path):
    with open("/proc/self/mounts") as f:
        return next((line.split()[2] for line in f if line.split()[1] == path), None)


@pytest.mark.skipif(os.geteuid() != 0, reason="installs a package into a clean root: needs root (debootstrap, "
                    "chroot, mount)")
def test_deb_in_clean_debian12_root():
    """The .deb installed by apt into a clean Debian 12 root (debootstrap --variant=minbase bookworm, cached in
    /var/cache/zeromount-ci, with the dependencies' .debs): apt must find every dependency the package declares,
    the binary must find every library it links, and the man page, copyright file and changelog must be where
    Debian tools look. Then `mount -t fuse.zeromount` and an fstab line are run *inside* that root by chroot, with
    /dev (for /dev/fuse) and /proc mounted in it: mount(8) of the clean root finds the installed
    /sbin/mount.fuse.zeromount, which runs the installed /usr/bin/zeromount with the root's own libraries. The
    mount itself lives in the host's mount table (chroot does not change the namespace), so the test reads it, and
    checks that the daemon serving it is the root's /usr/bin/zeromount, from the host. A chroot rather than the
    host's mount(8) with ZEROMOUNT pointed at the installed binary: that would run the binary with the host's
    libraries, and so prove nothing about the package's dependencies."""
    deb = build_deb()
    fields = {k: subprocess.run(["dpkg-deb", "-f", deb, k], capture_output=True, text=True, check=True).stdout.strip()
              for k in ("Package", "Version", "Depends")}
    with clean_root() as root:
        shutil.copy(deb, os.path.join(root, "tmp"))
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "/tmp/" + os.path.basename(deb)]
        r = in_root(root, *install)
        if r.returncode != 0 and NO_NETWORK.search(r.stdout + r.stderr):
            in_root(root, "apt-get", "update", "-qq")  # the cached lists may name versions the mirror dropped
            r = in_root(root, *install)
        if r.returncode != 0 and NO_NETWORK.search(r.stdout + r.stderr):
            pytest.skip(f"apt could not fetch the package's dependencies ({fields['Depends']}): no network or "
                        f"mirror: {r.stdout[-2000:]}{r.stderr[-2000:]}")
        assert r.returncode == 0, f"apt-get install of the .deb (Depends: {fields['Depends']}): {r.stdout}{r.stderr}"
        status = in_root(root, "dpkg-query", "-W", "-f=${Status} ${Version}", "zeromount", check=True).stdout
        assert status == f"install ok installed {fields['Version']}"
        ldd = in_root(root, "ldd", "/usr/bin/zeromount", check=True).stdout
        assert "not found" not in ldd, ldd
        assert in_root(root, "zeromount", "--version", check=True).stdout.split()[-1] == \
            fields["Version"].rsplit("-", 1)[0]

        # What man(1) and Debian's tools look for.
        page = os.path.join(root, "usr/share/man/man1/zeromount.1.gz")
        with open(os.path.join(REPO, "docs", "zeromount.1"), "rb") as f:
            assert gzip.open(page).read() == f.read()
        assert in_root(root, "man", "-w", "zeromount", check=True).stdout.strip() == \
            "/usr/share/man/man1/zeromount.1.gz"
        # mount.fuse.zeromount(8) is a link to zeromount(1), which man -w names.
        assert in_root(root, "man", "-w", "8", "mount.fuse.zeromount", check=True).stdout.strip() == \
            "/usr/share/man/man1/zeromount.1.gz"
        assert os.readlink(os.path.join(root, "usr/share/man/man8/mount.fuse.zeromount.8.gz")) == \
            "../man1/zeromount.1.gz"
        shown = subprocess.run(["chroot", root, *CHROOT_ENV, "MANWIDTH=80", "man", "--warnings", "zeromount"],
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0 and shown.stderr == "", shown.stderr
        for section in ("SYNOPSIS", "OPTIONS", "MOUNT OPTIONS", "SUBCOMMANDS", "EXIT STATUS", "FILES", "EXAMPLES"):
            assert f"\n{section}\n" in shown.stdout, section
        doc = os.path.join(root, "usr/share/doc/zeromount")
        with open(os.path.join(doc, "copyright")) as f:
            assert f.readline() == "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        changelog = gzip.open(os.path.join(doc, "changelog.Debian.gz"), "rt").readline()
        assert changelog.startswith(f"zeromount ({fields['Version']}) "), changelog

        # mount(8) of the clean root with the installed helper and binary; then an fstab line.
        shutil.copytree(SRC, os.path.join(root, "srv/ckpt"))
        for name in ("zm", "zm-fstab"):
            os.makedirs(os.path.join(root, "mnt", name))
        mnt, mnt2 = os.path.join(root, "mnt/zm"), os.path.join(root, "mnt/zm-fstab")
        in_root(root, "mount", "-t", "fuse.zeromount", "/srv/ckpt", "/mnt/zm", timeout=60, check=True)
        assert fuse_type(mnt) == "fuse.zeromount"
        with open(os.path.join(mnt, "latest_universal")) as f:
            assert f.read() == "global_step3_universal"
        assert os.path.exists(os.path.join(mnt, "global_step3_universal", "zero", "optimizer_state.pt"))
        daemons = {os.readlink(f"/proc/{pid}/exe") for pid in processes_in(root)}  # the daemon (and its child)
        assert daemons == {os.path.join(root, "usr/bin/zeromount")}, daemons
        with open(os.path.join(root, "etc/fstab"), "a") as f:
            f.write("/srv/ckpt /mnt/zm-fstab fuse.zeromount ro,nofail,allow_other 0 0\n")
        in_root(root, "mount", "/mnt/zm-fstab", timeout=60, check=True)
        assert fuse_type(mnt2) == "fuse.zeromount"
        assert "optimizer_state.pt" in os.listdir(os.path.join(mnt2, "global_step3_universal", "zero"))
        # umount(8) of the root ends both mounts, and their daemons.
        for m in ("/mnt/zm", "/mnt/zm-fstab"):
            in_root(root, "umount", m, timeout=60, check=True)
        deadline = time.time() + 10
        while processes_in(root) and time.time() < deadline:
            time.sleep(0.1)
        assert not processes_in(root) and not [m for m in mounts_below(root) if "/mnt/" in m]
