"""Issue 44 through FUSE: processes read random ranges of a mount's made-up files (universal atoms,
weights shards, DCP items, the rank files of many layouts/ targets) while a loop beside them drops
the kernel's caches (pages, dentries and inodes: reads go back to the daemon, made entries are
forgotten and made again), once with the daemon's default cache of built files and once with
`-o cache=0` (every open of another file evicts one that others read). Every byte is compared with
`zeromount export` of the same views."""
import multiprocessing
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import FIXTURES, ZEROMOUNT, mount

SOURCE = "z3_ws2_bf16_pg2"
TAG = "global_step3"
# More DeepSpeed targets than the daemon keeps plans of (8 per kind).
LAYOUTS = ["zero1-dp3-fp32", "zero1-dp2-bf16", "zero2-dp4-fp32", "zero2-dp3-bf16", "zero3-dp3-fp32",
           "zero3-dp4-bf16", "zero3-dp2-fp32-sg200", "bf16opt-dp2", "zero2-dp5-fp32"]
# Read whole through the mount by one reader before the storm, not exported: DCP targets (`export
# --layout` writes DeepSpeed layouts only) and .distcp items (an export writes real CRC-32s into .pt
# files only, a -o crc mount into every zip).
ALONE = ["layouts/fsdp-dp2", "layouts/fsdp-dp3"]
FOLDERS = [f"{TAG}_universal", f"{TAG}_fp32", f"{TAG}_bf16", f"{TAG}_dcp"]
PROCESSES = 4
SECONDS = float(os.environ.get("ZM_STRESS_SECONDS", "8"))  # per mount
DROP_CACHES = "/proc/sys/vm/drop_caches"


def export(src, out, *args):
    r = subprocess.run([ZEROMOUNT, "export", src, str(out), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def files_below(root):
    out = []
    for dirpath, _, files in os.walk(root):
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in files]
    return sorted(out)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return reference(os.path.join(FIXTURES, SOURCE, "checkpoint"), tmp_path_factory.mktemp("exported"))


def reference(src, tmp):
    """(path in the mount, path of the exported copy) of every file compared; .distcp items apart."""
    pairs, alone = [], []
    export(src, tmp / "all", "--view", "all")
    for folder in FOLDERS:
        assert os.path.isdir(tmp / "all" / folder), folder
        for p in files_below(tmp / "all" / folder):
            (alone if p.endswith(".distcp") else pairs).append((f"{folder}/{p}", str(tmp / "all" / folder / p)))
    for name in LAYOUTS:
        export(src, tmp / name, "--layout", name)
        pairs += [(f"layouts/{name}/{p}", str(tmp / name / p)) for p in files_below(tmp / name)]
    return pairs, [rel for rel, _ in alone]


def read_alone(mnt, tmp, rels):
    """Each file as one reader reads it whole, with nothing else running."""
    rels = rels + [f"{d}/{p}" for d in ALONE for p in files_below(f"{mnt}/{d}")]
    pairs = []
    for rel in rels:
        ref = tmp / "alone" / rel
        ref.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{mnt}/{rel}", "rb") as f:
            ref.write_bytes(f.read())
        pairs.append((rel, str(ref)))
    return pairs


def reader(mnt, pairs, seed, deadline, out):
    """Opens a random file, reads 1-4 random ranges of it, compares; until the deadline."""
    rng = random.Random(seed)
    want = {}
    for rel, ref in pairs:
        with open(ref, "rb") as f:
            want[rel] = f.read()
    reads = nbytes = bad = errors = 0
    first = ""
    while time.monotonic() < deadline:
        rel = rng.choice(pairs)[0]
        w = want[rel]
        try:
            fd = os.open(os.path.join(mnt, rel), os.O_RDONLY)
            try:
                if os.fstat(fd).st_size != len(w):
                    bad += 1
                    first = first or f"{rel}: size {os.fstat(fd).st_size}, exported {len(w)}"
                for _ in range(rng.randint(1, 4)):
                    off = rng.randrange(len(w) + 1)
                    n = len(w) if rng.random() < 0.125 else rng.randint(1, 8192)
                    got = os.pread(fd, n, off)
                    if got != w[off:off + n]:
                        bad += 1
                        first = first or f"{rel}: bytes {off}..{off + n} differ from the export"
                    reads += 1
                    nbytes += len(got)
            finally:
                os.close(fd)
        except OSError as e:
            errors += 1
            first = first or f"{rel}: {e}"
    out.put((reads, nbytes, bad, errors, first))


def drop_caches(deadline, result):
    """Writes 3 to drop_caches every 0.25 s until the deadline, where it can (CI runs as root)."""
    while time.monotonic() < deadline:
        try:
            with open(DROP_CACHES, "w") as f:
                f.write("3\n")
            result["drops"] += 1
        except OSError as e:
            result["refused"] = f"could not drop caches ({DROP_CACHES}: {e.strerror})"
            return
        time.sleep(0.25)


def stats(mnt):
    with open(f"{mnt}/.zeromount/stats") as f:
        return dict(line.split(" ", 1) for line in f.read().splitlines() if not line.startswith("pid "))


@pytest.mark.parametrize("cache", ["default", "0"])
def test_processes_read_random_ranges_while_the_kernel_drops_its_caches(exported, tmp_path, cache, capsys,
                                                                        record_property):
    t0 = time.monotonic()
    src = os.path.join(FIXTURES, SOURCE, "checkpoint")
    pairs, distcp = exported
    assert len(pairs) > 60 and distcp, (len(pairs), distcp)
    pairs = list(pairs)
    # -o crc: an export writes real CRC-32s, and so must the mount to be byte-identical.
    with mount(src, "-o", "crc" if cache == "default" else f"crc,cache={cache}") as m:
        alone = read_alone(m, tmp_path, distcp)
        pairs += alone
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        deadline = time.monotonic() + SECONDS
        procs = [ctx.Process(target=reader, args=(m, pairs, k, deadline, out)) for k in range(PROCESSES)]
        for p in procs:
            p.start()
        dropped = {"drops": 0, "refused": ""}
        dropper = threading.Thread(target=drop_caches, args=(deadline, dropped))
        dropper.start()
        results = [out.get(timeout=SECONDS + 60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        dropper.join()
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        s = stats(m)
    reads, nbytes, bad, errors = (sum(r[i] for r in results) for i in range(4))
    first = next((r[4] for r in results if r[4]), "")
    line = (f"[stress] cache {cache}: {PROCESSES} processes, {len(pairs)} files ({len(alone)} read alone), {reads} reads, {nbytes} bytes compared, "
            f"{dropped['drops']} cache drops{', ' + dropped['refused'] if dropped['refused'] else ''}; daemon: "
            f"files_evicted_in_use {s['files_evicted_in_use']}, plans_evicted_in_use {s['plans_evicted_in_use']}; "
            f"{time.monotonic() - t0:.1f} s")
    with capsys.disabled():
        print("\n" + line)
    for k, v in [("processes", PROCESSES), ("files", len(pairs)), ("reads", reads), ("bytes_compared", nbytes),
                 ("cache_drops", dropped["drops"])]:
        record_property(k, v)
    assert bad == 0 and errors == 0, first
    assert reads > 0 and all(r[0] > 0 for r in results), "every process read"
    assert dropped["drops"] > 0 or dropped["refused"], dropped
    if cache == "0":
        assert int(s["files_evicted_in_use"]) > 0, "no file was evicted while open: the storm proved nothing"


def test_a_cache_that_is_not_a_number_of_bytes_is_refused(tmp_path):
    r = subprocess.run([ZEROMOUNT, os.path.join(FIXTURES, SOURCE, "checkpoint"), str(tmp_path), "-o", "cache=16MB"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "-o cache: '16MB' is not a number of bytes" in r.stderr, r.stderr
