"""In the field (issue 13): permissions that follow the source, seen by a second, unprivileged
user; links, unreadable entries and linked tag folders shown as the kernel would; tags in
training order."""
import errno
import os
import pwd
import shutil
import stat
import subprocess

import pytest

from conftest import FIXTURES, TEST_ROOT, ZEROMOUNT, mount

TAG = "global_step3"
USER = "zmtest"
SRC = os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="creates a second user and chowns files: needs root")


def second_user():
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        return pwd.getpwnam(USER)


def read_as(user, path):
    """errno of reading `path` as `user` (0 when it reads)."""
    r = subprocess.run(["runuser", "-u", user, "--", "/usr/bin/python3", "-c",
                        "import sys\ntry:\n open(sys.argv[1], 'rb').read(1); print(0)\n"
                        "except OSError as e:\n print(e.errno)", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def world_readable_copy(tmp_path):
    os.chmod(TEST_ROOT, 0o755)  # the mounts live below it: let the second user reach them
    src = tmp_path / "ckpt"
    shutil.copytree(SRC, src)
    os.chmod(tmp_path, 0o755)
    for d, dirs, files in os.walk(src):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return src


@as_root
def test_a_second_user_reads_only_what_the_source_lets_them(tmp_path):
    second_user()
    src = world_readable_copy(tmp_path)
    (src / "secrets.env").write_text("TOKEN=1\n")
    os.chmod(src / "secrets.env", 0o600)
    os.mkdir(src / "private")
    (src / "private" / "notes.txt").write_text("mine\n")
    os.chmod(src / "private", 0o700)
    with mount(str(src), "-o", "allow_other") as m:
        st = os.stat(f"{m}/secrets.env")
        assert oct(st.st_mode & 0o777) == "0o400" and st.st_uid == 0, "source mode without write bits"
        assert read_as(USER, f"{m}/secrets.env") == errno.EACCES
        assert read_as(USER, f"{m}/private/notes.txt") == errno.EACCES
        assert read_as(USER, f"{m}/latest") == 0
        assert read_as(USER, f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt") == 0
    # Shards the second user may not read: nothing made from them is readable either.
    shard = src / TAG / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    os.chmod(shard, 0o600)
    with mount(str(src), "-o", "allow_other") as m:
        assert read_as(USER, f"{m}/{TAG}/zero_pp_rank_1_mp_rank_00_optim_states.pt") == errno.EACCES
        for made in (f"{TAG}_universal/zero/fc1.weight/fp32.pt", f"{TAG}_fp32/model.safetensors",
                     f"{TAG}_params/fc1.weight/exp_avg.npy"):
            assert read_as(USER, f"{m}/{made}") == errno.EACCES, made
            assert os.stat(f"{m}/{made}").st_mode & 0o004 == 0
        assert read_as(USER, f"{m}/{TAG}_universal/mp_rank_00_model_states.pt") == 0, "a real file keeps its own mode"
        with open(f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt", "rb") as f:  # the owner still reads
            assert f.read(2) == b"PK"
    # A tag folder closed to others closes its made-up folders too.
    os.chmod(shard, 0o644)
    os.chmod(src / TAG, 0o700)
    with mount(str(src), "-o", "allow_other") as m:
        assert os.stat(f"{m}/{TAG}_universal").st_mode & 0o777 == 0o500
        assert read_as(USER, f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt") == errno.EACCES


@as_root
def test_a_closed_parent_of_src_does_not_close_the_mount(tmp_path):
    """README, Permissions: SRC and what lies below it are carried over, the folders above it are not."""
    second_user()
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    src = world_readable_copy(tmp_path)
    src = shutil.move(src, closed / "ckpt")
    assert read_as(USER, f"{src}/latest") == errno.EACCES, "the parent keeps the second user out of SRC"
    with mount(str(src), "-o", "allow_other") as m:
        assert read_as(USER, f"{m}/latest") == 0, "but not out of a mount that lives elsewhere"
        assert read_as(USER, f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt") == 0


def test_links_stay_links_and_broken_ones_do_not_refuse_the_mount(tmp_path):
    src = tmp_path / "ckpt"
    shutil.copytree(SRC, src)
    os.symlink("nowhere", src / "dangling")
    os.symlink("loop", src / "loop")
    os.symlink("latest", src / "latest.link")
    with mount(str(src)) as m:
        assert os.readlink(f"{m}/dangling") == "nowhere" and not os.path.exists(f"{m}/dangling")
        assert os.readlink(f"{m}/loop") == "loop"
        with pytest.raises(OSError) as e:
            open(f"{m}/loop").read()
        assert e.value.errno == errno.ELOOP
        assert open(f"{m}/latest.link").read() == open(f"{m}/latest").read()
        # Only a link into the mount itself is refused aloud (issue 27): these are just links.
        assert open(f"{m}/.zeromount/errors").read() == ""


def test_a_linked_tag_is_named_by_its_link_and_an_alias_is_indexed_once(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(os.path.join(SRC, TAG), store / TAG)
    src = tmp_path / "ckpt"
    src.mkdir()
    os.symlink(store / TAG, src / "global_step5")  # a tag that lives elsewhere
    (src / "latest").write_text("global_step5")
    shutil.copytree(os.path.join(SRC, TAG), src / TAG)
    os.symlink(TAG, src / "best")  # an alias of a real tag folder
    with mount(str(src)) as m:
        names = set(os.listdir(m))
        assert {"global_step5_universal", f"{TAG}_universal"} <= names
        assert "best_universal" not in names, "an alias is not a second tag"
        assert os.readlink(f"{m}/best") == TAG
        assert open(f"{m}/latest_universal").read() == "global_step5_universal"
        assert os.path.getsize(f"{m}/global_step5_universal/zero/fc1.weight/fp32.pt") > 0


def test_inspect_takes_the_newest_tag_in_training_order(tmp_path):
    src = tmp_path / "ckpt"
    src.mkdir()
    for t in ("global_step20", "global_step100"):
        shutil.copytree(os.path.join(SRC, TAG), src / t)
    r = subprocess.run([ZEROMOUNT, "inspect", str(src)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "global_step100" in r.stdout.splitlines()[0], r.stdout


@as_root
def test_an_unprivileged_user_mounts_a_folder_with_entries_it_cannot_read():
    import tempfile
    user = second_user()
    os.chmod(TEST_ROOT, 0o755)
    tmp_path = __import__("pathlib").Path(tempfile.mkdtemp(dir=TEST_ROOT))  # reachable by the user
    src = world_readable_copy(tmp_path)
    os.mkdir(src / "lost+found")
    os.chmod(src / "lost+found", 0o700)  # root's, as mkfs leaves it
    for d, dirs, files in os.walk(src):
        if "lost+found" in d:
            continue
        os.chown(d, user.pw_uid, user.pw_gid)
        for f in files:
            os.chown(os.path.join(d, f), user.pw_uid, user.pw_gid)
    os.chmod(TEST_ROOT, 0o755)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    os.chown(mnt, user.pw_uid, user.pw_gid)
    os.chmod(tmp_path, 0o755)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    os.chown(tmp_path / "cache", user.pw_uid, user.pw_gid)
    dev_mode = os.stat("/dev/fuse").st_mode & 0o777
    os.chmod("/dev/fuse", 0o666)  # as Debian's udev rule leaves it; some containers have 0600
    try:
        r = subprocess.run(["runuser", "-u", USER, "--", ZEROMOUNT, str(src), str(mnt)], capture_output=True,
                           text=True, timeout=120, env=env)
    finally:
        os.chmod("/dev/fuse", dev_mode)
    try:
        assert r.returncode == 0, r.stderr
        # Only the mounting user sees a mount without allow_other: look as that user.
        seen = subprocess.run(["runuser", "-u", USER, "--", "/usr/bin/python3", "-c",
                               "import os,sys; s=os.lstat(sys.argv[1]); print(s.st_uid, oct(s.st_mode & 0o777))",
                               str(mnt / "lost+found")], capture_output=True, text=True, timeout=60)
        assert seen.stdout.split() == ["0", "0o500"], "shown as the kernel would: root's, closed"
        assert read_as(USER, str(mnt / f"{TAG}_universal/zero/fc1.weight/fp32.pt")) == 0
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


def test_more_files_than_descriptors_and_a_deleted_source_holds_none(tmp_path):
    src = tmp_path / "ckpt"
    shutil.copytree(SRC, src)
    (src / "logs").mkdir()
    for k in range(3000):
        (src / "logs" / f"{k:05d}.log").write_text(f"line {k}\n")
    mnt = tmp_path / "m"
    mnt.mkdir()
    # A descriptor limit far below the file count: files are opened on first read, never all at once.
    r = subprocess.run(["prlimit", "--nofile=512:512", ZEROMOUNT, str(src), str(mnt)], capture_output=True,
                       text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        for k in range(0, 3000, 7):
            assert open(mnt / "logs" / f"{k:05d}.log").read() == f"line {k}\n"
        server = [p for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/comm") and
                  open(f"/proc/{p}/comm").read().strip() == "zm-serve" and
                  str(mnt).encode() in open(f"/proc/{p}/cmdline", "rb").read()][0]
        # At most 256 files, and the 64 folders ds::open_dir keeps (issue 27 item 9: folders are
        # looked into by descriptor).
        def open_files(folders):
            out = []
            for fd in os.listdir(f"/proc/{server}/fd"):
                try:
                    if stat.S_ISDIR(os.stat(f"/proc/{server}/fd/{fd}").st_mode) == folders:
                        out.append(os.readlink(f"/proc/{server}/fd/{fd}"))
                except OSError:
                    pass
            return out
        assert len([f for f in open_files(False) if f.startswith(str(src))]) <= 256
        assert len([f for f in open_files(True) if f.startswith(str(src))]) <= 64
        shutil.rmtree(src)  # the source goes away: the daemon must not keep it allocated
        with pytest.raises(OSError):
            open(mnt / "logs" / "00001.log").read()  # not read before: it cannot be opened any more
        assert len([f for f in open_files(False) if "(deleted)" in f]) <= 256
        assert len([f for f in open_files(True) if "(deleted)" in f]) <= 64
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


def test_an_overwrite_that_restores_the_mtime_is_still_stale(tmp_path):
    src = tmp_path / "ckpt"
    shutil.copytree(SRC, src)
    shard = src / TAG / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    with mount(str(src)) as m:
        st = os.stat(shard)
        with open(shard, "r+b") as f:  # same size, and the mtime put back: only ctime tells
            f.seek(200)
            b = f.read(1)
            f.seek(200)
            f.write(bytes([b[0] ^ 0xFF]))
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
        with pytest.raises(OSError) as e:
            open(f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt", "rb").read()
        assert e.value.errno == errno.ESTALE


@as_root
def test_a_tag_restricted_at_the_mount_is_named_on_the_page_across_tags_not_locking_it(tmp_path):
    """One rule for the page across tags (issue 27 item 10): a tag whose shards fewer users may read
    is named and left out, whether it was there at the mount or saved later; the page stays the
    folder's to read, with every other tag on it."""
    second_user()
    src = world_readable_copy(tmp_path)
    shutil.copytree(src / TAG, src / "global_step5")
    for f in os.listdir(src / "global_step5"):
        os.chmod(src / "global_step5" / f, 0o600)
    with mount(str(src), "-o", "allow_other") as m:
        assert read_as(USER, f"{m}/report.html") == 0, "the page is readable by who may list the folder"
        page = subprocess.run(["runuser", "-u", USER, "--", "cat", f"{m}/report.html"], capture_output=True,
                              text=True, timeout=120, check=True).stdout
        assert "global_step5: its shards are readable by fewer users than this page" in page
        assert TAG in page
        assert read_as(USER, f"{m}/global_step5_universal/zero/fc1.weight/fp32.pt") == errno.EACCES


def chain(root, depth, name):
    """root/name/name/... (`depth` folders) made through descriptors (it may be deeper than a path
    can name), with a file `bottom` in the last one."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
        f.write("the bottom\n")
    os.close(fd)


def unchain(root, depth, name):
    """Removes what chain() made, bottom up, through descriptors (shutil.rmtree recurses per level:
    pytest's cleanup of old tmp_path folders would hit Python's recursion limit)."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    for _ in range(depth):
        fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
    os.unlink("bottom", dir_fd=fds[-1])
    while len(fds) > 1:
        os.close(fds.pop())
        os.rmdir(name, dir_fd=fds[-1])
    os.close(fds[0])


def test_a_deep_chain_is_shown_to_its_bottom_and_a_path_past_path_max_is_logged(tmp_path):
    """Issue 27 item 9: folders are looked into by descriptor; every level of a 1,500-folder chain
    lists, twice (the second walk rescans each level), and an entry whose path the kernel would
    refuse (over PATH_MAX) is left out with a log line, its folder showing the rest."""
    deep, wide = tmp_path / "deep", tmp_path / "wide"
    deep.mkdir()
    wide.mkdir()
    chain(str(deep), 1500, "d")
    chain(str(wide), 20, "n" * 250)
    try:
        see_deep_chains(deep, wide, tmp_path / "zm.log")
    finally:
        unchain(str(deep), 1500, "d")
        unchain(str(wide), 20, "n" * 250)


def see_deep_chains(deep, wide, log):
    with mount(str(deep), "-o", "rescan=0.01") as m:
        for walk in range(2):
            found = subprocess.run(["find", m], check=True, capture_output=True, timeout=120).stdout.splitlines()
            found = [p for p in found if b"/.zeromount" not in p]
            assert len(found) == 1 + 1500 + 1, f"walk {walk}"  # the root, each level, the bottom file
        bottom = m + "/d" * 1500 + "/bottom"
        assert len(bottom) < 4096
        assert open(bottom).read() == "the bottom\n"
    with mount(str(wide), "--log-file", str(log)) as m:
        shown = (4095 - len(str(wide))) // 251
        found = subprocess.run(["find", m, "-name", "n" * 250], capture_output=True, timeout=120).stdout.splitlines()
        assert len(found) == shown
    assert "not shown: its path is longer than PATH_MAX" in log.read_text()
