"""docs/SEMANTICS.md, row by row: every name row's example exists in a real mount and every name a
mount shows matches a row; every operation row is exercised and gives the result the row states,
and every operation this test knows has a row. The page fails the build when it drifts."""
import errno
import os
import re
import shutil
import stat
import time

import pytest

from conftest import FIXTURES, mount

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                   "SEMANTICS.md")
SOURCE = "z2_ws2_bf16_pg2"  # a 16-bit ZeRO-2 run: every kind of made-up name appears
TAG = "global_step3"


def table(section):
    """The rows of the first table after '## <section>', as lists of cells."""
    text = open(DOC).read()
    body = text[text.index(f"## {section}\n"):]
    rows = []
    for line in body.splitlines()[1:]:
        if rows and not line.startswith("|"):
            break  # the first table only
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
    return rows[1:]  # without the header


def code(cell):
    return re.findall(r"`([^`]+)`", cell)


def pattern(name):
    """A name row's name as a regex over mount-relative paths: <T> a tag, <param> a folder, N a number."""
    any_name = r"[^\x2f]+"  # no literal slash, so that a pattern splits into path components
    parts = re.split(r"(<[a-z]+>|<T>|_N_)", name)
    rx = "".join(any_name if re.fullmatch(r"<[a-zA-Z]+>", x) else r"_\d+_" if x == "_N_" else re.escape(x)
                 for x in parts)
    return rx.rstrip("/")


@pytest.fixture(scope="module")
def mnt():
    with mount(os.path.join(FIXTURES, SOURCE, "checkpoint")) as m:
        yield m


def test_every_name_row_has_a_real_example(mnt):
    rows = table("Names")
    assert len(rows) >= 15
    for name, _, _, example in rows:
        ex = code(example)
        assert len(ex) == 1, f"row {name!r} needs one example"
        path = os.path.join(mnt, ex[0])
        assert os.path.exists(path), f"{ex[0]} (row {name!r}) is not in the mount"
        assert os.path.isdir(path) == ex[0].endswith("/"), f"{ex[0]}: folder rows end in '/'"
        names = [n for n in code(name) if "<" in n or "_N_" in n]
        if names:
            assert any(re.fullmatch(pattern(n), ex[0].rstrip("/")) for n in names), f"{ex[0]} matches none of {names}"


def test_every_made_up_name_is_documented(mnt):
    rows = table("Names")
    patterns = [pattern(n).split("/") for r in rows for n in code(r[0])]

    def documented(rel):
        parts = rel.split("/")
        return any(len(p) >= len(parts) and all(re.fullmatch(a, b) for a, b in zip(p, parts)) for p in patterns)

    src = set(os.listdir(os.path.join(FIXTURES, SOURCE, "checkpoint")))
    seen = 0
    for dirpath, dirnames, filenames in os.walk(mnt):
        rel_dir = os.path.relpath(dirpath, mnt)
        if rel_dir.split("/")[0] in src:
            dirnames.clear()  # "every file and folder of SRC"
            continue
        for e in dirnames + filenames:
            rel = e if rel_dir == "." else f"{rel_dir}/{e}"
            if rel in src:
                continue
            assert documented(rel), f"{rel} is shown but not documented"
            seen += 1
    assert seen > 50


def errno_of(action):
    try:
        action()
    except OSError as e:
        return e.errno
    return 0


def operations(m, tmp):
    """Each operation row's check: returns None when the row holds, else what was seen."""
    f = os.path.join(m, f"{TAG}_universal", "zero", "fc1.weight", "fp32.pt")
    d = os.path.join(m, f"{TAG}_universal")

    def expect(e, action):
        got = errno_of(action)
        return None if got == e else f"{errno.errorcode.get(got, got)}"

    def all_(*checks):
        bad = [c for c in checks if c is not None]
        return bad[0] if bad else None

    def private_copy(name):
        """A copy of the source that a check may change, for a mount of its own."""
        src = os.path.join(tmp, name)
        shutil.copytree(os.path.join(FIXTURES, SOURCE, "checkpoint"), src)
        return src

    def stat_file():
        st = os.stat(f)
        with open(f, "rb") as fh:
            n = len(fh.read())
        ok = stat.S_IMODE(st.st_mode) == 0o444 and st.st_size == n and st.st_blksize == 1 << 20
        return None if ok else f"mode {oct(st.st_mode)} size {st.st_size} (read {n}) blksize {st.st_blksize}"

    def readlink():
        src = private_copy("linked")
        os.symlink("global_step3/../latest", os.path.join(src, "link"))
        with mount(src) as m2:
            got = os.readlink(os.path.join(m2, "link"))
            return None if got == "global_step3/../latest" and os.path.islink(os.path.join(m2, "link")) else got

    def readdir():
        fd = os.open(d, os.O_RDONLY)
        try:
            names = sorted(os.listdir(d))
        finally:
            os.close(fd)
        return None if os.listdir(d) == os.listdir(d) and "zero" in names else "listing changed"

    def read():
        with open(f, "rb") as fh:
            data = fh.read()
            fh.seek(len(data) + 10)
            return None if data and fh.read(5) == b"" else "short or past-the-end read"

    def statfs():
        s = os.statvfs(m)
        return None if s.f_flag & os.ST_RDONLY and s.f_files == 0 and s.f_blocks > 0 else str(s)

    def changed_shard(want):
        # A private mount of a copy whose shard is rewritten in place, same size.
        src = private_copy("changed")
        shard = os.path.join(src, TAG, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
        with mount(src) as m2:
            target = os.path.join(m2, f"{TAG}_universal", "zero", "fc1.weight", "fp32.pt")
            with open(shard, "r+b") as fh:
                fh.seek(100)
                b = fh.read(1)
                fh.seek(100)
                fh.write(bytes([b[0] ^ 1]))
            os.utime(shard, ns=(1, 1))
            return expect(want, lambda: open(target, "rb").read())

    def chmod_linked_shard(want):
        # No byte changes: a chmod and a hard link move the ctime only (issue 27, item 8).
        src = private_copy("chmodded")
        shard = os.path.join(src, TAG, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
        with mount(src) as m2:
            target = os.path.join(m2, f"{TAG}_universal", "zero", "fc1.weight", "fp32.pt")
            before = open(target, "rb").read()
            os.chmod(shard, 0o640)
            os.link(shard, os.path.join(src, "hardlink.pt"))
            got = errno_of(lambda: open(target, "rb").read())
            if got:
                return errno.errorcode.get(got, str(got))
            return None if want is None and open(target, "rb").read() == before else "other bytes"

    def chmod_changing_nothing(want):
        # `chmod -R a+rX` and `touch -a` on a shared checkpoint: the ctime moves, mode, owner and
        # links stay (issue 40): the pickle is hashed again and reads go on.
        src = private_copy("chmod-same")
        shard = os.path.join(src, TAG, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
        with mount(src) as m2:
            target = os.path.join(m2, f"{TAG}_universal", "zero", "fc1.weight", "fp32.pt")
            before = open(target, "rb").read()
            st = os.stat(shard)
            os.chmod(shard, stat.S_IMODE(st.st_mode))
            os.utime(shard, ns=(st.st_atime_ns + 10**9, st.st_mtime_ns))
            if os.stat(shard).st_ctime_ns == st.st_ctime_ns:
                return "the ctime did not move: nothing was checked"
            got = errno_of(lambda: open(os.path.join(m2, f"{TAG}_universal", "zero", "fc1.weight", "exp_avg.pt"),
                                        "rb").read())
            if got:
                return errno.errorcode.get(got, str(got))
            return None if want is None and open(target, "rb").read() == before else "other bytes"

    def replaced_shard(want):
        src = private_copy("replaced")
        shard = os.path.join(src, TAG, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
        with mount(src) as m2:
            target = os.path.join(m2, f"{TAG}_universal", "zero", "fc1.weight", "exp_avg.pt")
            os.unlink(shard)
            return expect(want, lambda: open(target, "rb").read())

    def new_tag(want):
        src = private_copy("growing")
        with mount(src) as m2:
            shutil.copytree(os.path.join(src, TAG), os.path.join(tmp, "gs5"))
            os.rename(os.path.join(tmp, "gs5"), os.path.join(src, "global_step5"))
            for _ in range(25):  # the rescan period is 1 s; so is the kernel's memory of a miss
                if os.path.exists(f"{m2}/global_step5_universal/zero/fc1.weight/fp32.pt"):
                    return None
                time.sleep(0.2)
            return "no global_step5_universal after 5 s"

    def rewritten_latest(want):
        src = private_copy("rewritten")
        with mount(src) as m2:
            shutil.copytree(os.path.join(src, TAG), os.path.join(src, "global_step5"))
            with open(os.path.join(src, "latest"), "w") as fh:
                fh.write("global_step5")
            time.sleep(1.1)
            got = open(f"{m2}/latest").read()
            return None if got == "global_step5" else got

    return {
        "lookup of a name that does not exist": lambda want: expect(want, lambda: os.stat(f"{m}/nope")),
        "stat of a file": lambda want: stat_file(),
        "readlink of a symbolic link": lambda want: readlink(),
        "stat of a folder": lambda want: None if stat.S_IMODE(os.stat(d).st_mode) == 0o555 else oct(os.stat(d).st_mode),
        "readdir": lambda want: readdir(),
        "open read-only, read": lambda want: read(),
        "open for writing (`O_WRONLY`, `O_RDWR`)": lambda want: all_(
            expect(want, lambda: os.open(f, os.O_WRONLY)), expect(want, lambda: os.open(f, os.O_RDWR))),
        "open with `O_TRUNC`": lambda want: expect(want, lambda: os.open(f, os.O_RDONLY | os.O_TRUNC)),
        "create, mkdir, mknod, symlink, link": lambda want: all_(
            expect(want, lambda: open(f"{m}/new", "wb")), expect(want, lambda: os.mkdir(f"{m}/d")),
            expect(want, lambda: os.mkfifo(f"{m}/p")), expect(want, lambda: os.symlink("x", f"{m}/s")),
            expect(want, lambda: os.link(f, f"{m}/l"))),
        "unlink, rmdir, rename": lambda want: all_(
            expect(want, lambda: os.unlink(f)), expect(want, lambda: os.rmdir(f"{d}/zero")),
            expect(want, lambda: os.rename(f, f + ".x"))),
        "chmod, truncate": lambda want: all_(
            expect(want, lambda: os.chmod(f, 0o644)), expect(want, lambda: os.truncate(f, 0))),
        "setxattr, removexattr": lambda want: all_(
            expect(want, lambda: os.setxattr(f, "user.x", b"1")),
            expect(want, lambda: os.removexattr(f, "user.x"))),
        "getxattr, listxattr": lambda want: all_(
            expect(want, lambda: os.getxattr(f, "user.x")),
            expect(want, lambda: os.listxattr(f))),
        "statfs": lambda want: statfs(),
        "read of a file built from a shard that changed (size, mtime or inode) since the mount": changed_shard,
        "read of a file built from a shard that was deleted or replaced since the mount": replaced_shard,
        "read of a file built from a shard after a chmod or a hard link of it": chmod_linked_shard,
        "read of a file built from a shard after a `chmod` or `touch -a` that changes nothing": chmod_changing_nothing,
        "lookup at the top level after a tag is saved into SRC": new_tag,
        "read of `latest` after the next save rewrites it": rewritten_latest,
    }


def test_every_operation_row_holds(mnt, tmp_path):
    ops = operations(mnt, str(tmp_path))
    rows = {r[0]: r[1] for r in table("Operations")}
    assert set(rows) == set(ops), f"rows without a check: {set(rows) - set(ops)}; checks without a row: {set(ops) - set(rows)}"
    for op, result in rows.items():
        names = re.findall(r"`(E[A-Z]+)`", result)
        assert all(hasattr(errno, n) for n in names), f"{op}: {names}"
        want = getattr(errno, names[0]) if names else None  # the page says which errno, the mount must give it
        problem = ops[op](want)
        assert problem is None, f"{op}: the page says {result!r}, the mount gave {problem}"
