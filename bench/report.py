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
with the bytes the page says it read. Prints a Markdown table. Asserts nothing."""
import argparse
import os
import re
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default="/tmp/zm70b/z3")
    a = ap.parse_args()
    if not os.path.isdir(a.ckpt):
        sys.exit(f"{a.ckpt}: make it first with tests/tools/gen_ckpt.py (see this file's docstring)")
    tag = tag_of(a.ckpt)
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
