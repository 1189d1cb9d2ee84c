"""Links in SRC (issue 27, items 1 to 3): a `latest` linked to a root-only file, a shard linked
into a closed folder outside SRC, and a tag folder or shard linked into the mount itself. A
second, unprivileged user reads through an allow_other mount, as on a shared node. The hang
tests run their reader in a child with a deadline; a stuck connection is aborted through
fusectl and lazily unmounted, so a regression fails the test instead of hanging the suite."""
import errno
import os
import shutil
import subprocess
import time

from conftest import ZEROMOUNT, mount, unmount
from test_field import TAG, USER, as_root, read_as, second_user, world_readable_copy

SECRET = "root:SECRET-HASH-27:20228:0:99999:7:::"


def errors_as(user, mnt):
    r = subprocess.run(["runuser", "-u", user, "--", "cat", f"{mnt}/.zeromount/errors"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def every_made_up_text(mnt):
    """The text of every small made-up file that could quote `latest`."""
    out = []
    for rel in [".zeromount/errors", "latest_universal", "layouts/README"]:
        p = os.path.join(mnt, rel)
        if os.path.isfile(p):
            out.append(open(p, errors="replace").read())
    layouts = os.path.join(mnt, "layouts")
    for target in os.listdir(layouts) if os.path.isdir(layouts) else []:
        p = os.path.join(layouts, target, "latest")
        if os.path.isfile(p):
            out.append(open(p, errors="replace").read())
    return "\n".join(out)


@as_root
def test_a_latest_linked_to_a_root_only_file_is_never_read(tmp_path):
    second_user()
    src = world_readable_copy(tmp_path)
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET + "\n")
    os.chmod(shadow, 0o600)
    os.unlink(src / "latest")
    os.symlink(shadow, src / "latest")
    with mount(str(src), "-o", "allow_other") as m:
        assert SECRET.split(":")[1] not in errors_as(USER, m)
        assert SECRET.split(":")[1] not in every_made_up_text(m), "the daemon read what the link names"
        assert os.readlink(f"{m}/latest") == str(shadow), "the link itself is shown as a link"
        assert read_as(USER, f"{m}/latest") == errno.EACCES, "the kernel follows it with the reader's rights"
        assert os.path.isdir(f"{m}/{TAG}_universal"), "the tags are served"


@as_root
def test_a_latest_naming_binary_text_is_quoted_short_on_one_line(tmp_path):
    src = world_readable_copy(tmp_path)
    (src / "latest").write_bytes(b"global_step9\n\x1b[2Jrm -rf /\n" + b"x" * 3000)
    with mount(str(src)) as m:
        errors = open(f"{m}/.zeromount/errors").read()
        line = [x for x in errors.splitlines() if x.startswith("latest:")]
        assert len(line) == 1, errors
        assert "\x1b" not in errors and "rm -rf /" in line[0] and "x" * 100 not in line[0], line[0]


@as_root
def test_a_shard_linked_into_a_closed_folder_closes_what_is_built_from_it(tmp_path):
    second_user()
    src = world_readable_copy(tmp_path)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    name = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shutil.move(src / TAG / name, closed / name)
    os.chmod(closed / name, 0o644)
    os.symlink(closed / name, src / TAG / name)
    assert read_as(USER, f"{src}/{TAG}/{name}") == errno.EACCES, "the second user cannot reach the real shard"
    with mount(str(src), "-o", "allow_other") as m:
        for made in (f"{TAG}_universal/zero/fc1.weight/fp32.pt", f"{TAG}_fp32/model.safetensors",
                     f"{TAG}_params/fc1.weight/exp_avg.npy", f"layouts/zero2-dp1-fp32/{TAG}/{name.replace('_1_', '_0_')}"):
            assert read_as(USER, f"{m}/{made}") == errno.EACCES, made
        with open(f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt", "rb") as f:  # the owner still reads
            assert f.read(2) == b"PK"
    # A tag folder linked from a closed folder outside SRC: the same rule.
    os.unlink(src / TAG / name)
    shutil.move(closed / name, src / TAG / name)
    shutil.move(src / TAG, closed / TAG)
    os.symlink(closed / TAG, src / TAG)
    with mount(str(src), "-o", "allow_other") as m:
        assert read_as(USER, f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt") == errno.EACCES
        assert os.path.isfile(f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt")


def fuse_abort(mnt):
    """Aborts a stuck connection (fusectl) and unmounts lazily: a hang must not outlive its test."""
    minor = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mnt:
                minor = int(fields[2].split(":")[1])
    if minor is not None and os.path.exists(f"/sys/fs/fuse/connections/{minor}/abort"):
        with open(f"/sys/fs/fuse/connections/{minor}/abort", "w") as f:
            f.write("1")
    subprocess.run(["umount", "-l", mnt], capture_output=True)


def list_with_deadline(path, seconds=20):
    child = subprocess.Popen(["ls", "-l", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, _ = child.communicate(timeout=seconds)
        return out
    except subprocess.TimeoutExpired:
        return None


def test_a_tag_folder_or_shard_linked_into_the_mount_is_refused_not_waited_on(tmp_path):
    # fusectl aborts a hung connection; mount it if it is not (as root). Without it the test still
    # runs: a regression then fails it, and only the cleanup of the hung mount is left undone.
    if not os.path.ismount("/sys/fs/fuse/connections"):
        subprocess.run(["mount", "-t", "fusectl", "none", "/sys/fs/fuse/connections"], capture_output=True)
    src = tmp_path / "ckpt"
    shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "z2_ws2_fp32_pg2",
                                 "checkpoint"), src)
    with mount(str(src), "-o", "rescan=0.2") as m:
        try:
            assert list_with_deadline(m) is not None
            os.symlink(f"{m}/{TAG}", src / "global_step9")
            # A tag folder whose rank 1 shard is a link into the mount.
            (src / "global_step8").mkdir()
            for f in os.listdir(src / TAG):
                if "rank_1" in f:
                    os.symlink(f"{m}/{TAG}/{f}", src / "global_step8" / f)
                else:
                    shutil.copy(src / TAG / f, src / "global_step8" / f)
            time.sleep(0.5)
            out = list_with_deadline(m)
            assert out is not None, "listing the mount hung: the daemon looked into itself"
            errors = open(f"{m}/.zeromount/errors").read()
            assert "global_step9: " in errors and "leads into the mount itself" in errors, errors
            assert "global_step8" in errors and "leads into the mount itself" in errors, errors
            assert not os.path.exists(f"{m}/global_step9_universal")
            assert not os.path.exists(f"{m}/global_step8_universal")
            assert os.path.isdir(f"{m}/{TAG}_universal")
        except BaseException:
            fuse_abort(m)
            raise
    # At mount time: the same links, made before the mount into the folder it will cover.
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for link in [src / "global_step9", *[p for p in (src / "global_step8").iterdir() if p.is_symlink()]]:
        target = os.readlink(link).replace(m, str(mnt))
        os.unlink(link)
        os.symlink(target, link)
    r = subprocess.run([ZEROMOUNT, str(src), str(mnt)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        assert list_with_deadline(str(mnt)) is not None, "listing the mount hung"
        errors = open(f"{mnt}/.zeromount/errors").read()
        assert "global_step9: " in errors and "global_step8" in errors, errors
        assert os.path.isdir(f"{mnt}/{TAG}_universal")
    except BaseException:
        fuse_abort(str(mnt))
        raise
    finally:
        unmount(str(mnt))
