#!/usr/bin/python3
"""Issue 22: what a report page costs on a 70B-shaped checkpoint (bench/README.md, "Report pages").

    /usr/bin/python3 tests/tools/gen_ckpt.py /tmp/zm70b/z3 --stage 3 --dp 512 --arch llama70b --sparse
    sudo /usr/bin/python3 bench/report.py [--ckpt /tmp/zm70b/z3]

One fresh mount. It measures, in order:
  stat      `stat MNT/<T>_params/report.html` (its size is known without reading a tensor)
  build     the first full read of that page: one streaming pass over every fp32 weight, exp_avg
            and exp_avg_sq of the tag (the shards are holes, so this is the pass's own cost)
  again     a second full read (the built page is kept)
  across    the first full read of MNT/report.html (the tag's figures are kept: no second pass)
and the daemon's RSS (VmRSS) idle after the mount and its high-water mark (VmHWM) after each step,
with the bytes the page says it read. Prints a Markdown table. Asserts nothing.

    sudo /usr/bin/python3 bench/report.py --ckpt DIR --compare OLD/zeromount NEW/zeromount [--rounds 3]

compares binaries instead: per round, each binary in turn (the order alternating from round to
round) mounts DIR fresh and builds the tag's page; the table gives the median of the pass's own
time, as the page states it, in GB/s of shard bytes. On a dense checkpoint in the page cache
(e.g. tests/tools/gen_ckpt.py DIR --stage 2 --dp 2 --sizes 4096x4096,...) that is the pass's rate."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from big import ZM, load, mem_mib, tag_of  # bench/big.py
from run import server_pid, unmount  # bench/run.py


def read_all(path):
    t = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        data = b"".join(iter(lambda: f.read(1 << 20), b""))
    return time.monotonic() - t, data


def page_pass(zm, ckpt, tag):
    """Mounts `ckpt` with `zm`, reads the tag's page; (bytes, seconds) as the page states them."""
    with tempfile.TemporaryDirectory() as work:
        mnt = os.path.join(work, "mnt")
        os.mkdir(mnt)
        subprocess.run([zm, ckpt, mnt], check=True)
        try:
            _, data = read_all(os.path.join(mnt, f"{tag}_params", "report.html"))
        finally:
            unmount(mnt)
    text = re.sub(rb"<[^>]*>|&nbsp;", b"", data)
    said = re.search(rb"(\d+) bytes\s+\([^)]*\)\s+read in\s+([0-9.]+) s", text)
    return int(said.group(1)), float(said.group(2))


def compare(a, tag):
    runs = {zm: [] for zm in a.compare}
    for r in range(a.rounds):
        for zm in (a.compare if r % 2 == 0 else a.compare[::-1]):
            runs[zm].append(page_pass(zm, a.ckpt, tag))
    print(f"checkpoint {a.ckpt} (tag {tag}); {a.rounds} rounds, alternating; load average at the end {load()}\n")
    print("| binary | shard bytes read | pass, median (s) | GB/s | rounds (s) |\n|---|---|---|---|---|")
    for zm, v in runs.items():
        secs = statistics.median(s for _, s in v)
        print(f"| {zm} | {v[0][0]:,} | {secs:.3f} | {v[0][0] / 1e9 / secs:.2f} | "
              f"{', '.join(f'{s:.3f}' for _, s in v)} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default="/tmp/zm70b/z3")
    ap.add_argument("--compare", nargs="+", metavar="ZEROMOUNT", help="binaries to compare (see above)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not os.path.isdir(a.ckpt):
        sys.exit(f"{a.ckpt}: make it first with tests/tools/gen_ckpt.py (see this file's docstring)")
    tag = tag_of(a.ckpt)
    if a.compare:
        return compare(a, tag)
    with tempfile.TemporaryDirectory() as work:
        mnt, log = os.path.join(work, "mnt"), os.path.join(work, "log")
        os.mkdir(mnt)
        subprocess.run([ZM, a.ckpt, mnt, "--log-file", log], check=True)
        try:
            pid = server_pid(mnt)
            rows = [("idle after mount", "", mem_mib(pid, log))]
            page = os.path.join(mnt, f"{tag}_params", "report.html")
            t = time.monotonic()
            size = os.stat(page).st_size
            rows.append(("stat of the page", f"{(time.monotonic() - t) * 1000:.0f} ms", mem_mib(pid, log)))
            took, data = read_all(page)
            assert len(data) == size, (len(data), size)
            text = re.sub(rb"<[^>]*>|&nbsp;", b"", data)
            said = re.search(rb"(\d+) bytes\s+\(([^)]*)\)\s+read in\s+([0-9.]+) s", text)
            note = f"page says: {said.group(2).decode()} read in {said.group(3).decode()} s" if said else ""
            rows.append((f"first read of the page ({size:,} bytes); {note}", f"{took:.1f} s", mem_mib(pid, log)))
            took, _ = read_all(page)
            rows.append(("second read of the page", f"{took * 1000:.0f} ms", mem_mib(pid, log)))
            took, data = read_all(os.path.join(mnt, "report.html"))
            rows.append((f"first read of report.html across tags ({len(data):,} bytes)", f"{took:.1f} s",
                         mem_mib(pid, log)))
        finally:
            unmount(mnt)
    print(f"checkpoint {a.ckpt} (tag {tag}); load average at the end {load()}\n")
    print("| step | time | daemon VmRSS | daemon VmHWM |\n|---|---|---|---|")
    for what, took, mem in rows:
        print(f"| {what} | {took} | {mem['VmRSS']:.0f} MiB | {mem['VmHWM']:.0f} MiB |")


if __name__ == "__main__":
    main()
