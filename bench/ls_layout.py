#!/usr/bin/python3
"""`ls -l` of a faked layout's tag folder with thousands of rank files, through a real mount.

    sudo /usr/bin/python3 bench/ls_layout.py [--ckpt /tmp/zm70b/z3] [--layout zero3-dp4096-bf16] [--runs 5]

The checkpoint comes from tests/tools/gen_ckpt.py --arch llama70b --sparse (made here if --ckpt is
missing: about 4 s, 184 MiB on disk). Each run is a fresh mount (index cache in a private
XDG_CACHE_HOME, warm after the first run) and times, in this order:
  lookup    `stat MNT/layouts/<layout>` (the O(params) plan)
  ls -l     `ls -l MNT/layouts/<layout>/<T>`: every rank file named and stat-ed (readdirplus, then
            the sizes; ZeRO-3 rank files are sized without being built)
  ls -l 2   the same again on that mount (the kernel's attribute cache)
  open      the first read of rank W-1's optimizer file (built on open)
and the daemon's VmHWM at the end. Prints a Markdown table (medians, and every run's figures) and
the load average. Asserts nothing: bench/README.md records the command and the result."""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from run import server_pid, unmount  # bench/run.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZM = os.path.join(os.environ.get("ZM_BUILD_DIR", os.path.join(ROOT, "build")), "zeromount")


def timed(cmd):
    t = time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.monotonic() - t, out


def one_run(ckpt, layout, work, env):
    mnt = tempfile.mkdtemp(dir=work)
    tag = open(os.path.join(ckpt, "latest")).read().strip()
    subprocess.run([ZM, ckpt, mnt, "--log-file", os.path.join(work, "zm.log")], check=True, env=env,
                   capture_output=True)
    r = {"load": " ".join(open("/proc/loadavg").read().split()[:3])}
    try:
        target = os.path.join(mnt, "layouts", layout)
        r["lookup"], _ = timed(["stat", target])
        r["ls -l"], out = timed(["ls", "-l", os.path.join(target, tag)])
        r["files"] = len([l for l in out.splitlines() if l.startswith("-")])
        r["ls -l 2"], _ = timed(["ls", "-l", os.path.join(target, tag)])
        W = int(layout.split("-dp")[1].split("-")[0])
        prefix = "bf16_" if layout.endswith("bf16") or layout.startswith("bf16opt") else ""
        t = time.monotonic()
        with open(os.path.join(target, tag, f"{prefix}zero_pp_rank_{W - 1}_mp_rank_00_optim_states.pt"), "rb") as f:
            f.read(1 << 20)
        r["open"] = time.monotonic() - t
        pid = server_pid(mnt)
        r["VmHWM MiB"] = int(next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmHWM")).split()[1]) / 1024
    finally:
        unmount(mnt)
        os.rmdir(mnt)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default="/tmp/zm70b/z3")
    ap.add_argument("--layout", default="zero3-dp4096-bf16")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.ckpt, "latest")):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "..", "tests", "tools", "gen_ckpt.py"), a.ckpt, "--stage", "3", "--dp", "512",
                        "--arch", "llama70b", "--sparse"], check=True)
    work = tempfile.mkdtemp(prefix="zm-ls-layout-")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "xdg"))
    try:
        runs = [one_run(a.ckpt, a.layout, work, env) for _ in range(a.runs)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = ["lookup", "ls -l", "ls -l 2", "open", "VmHWM MiB"]
    print(f"`ls -l` of layouts/{a.layout}/<T> ({runs[0]['files']} files) of {a.ckpt}, {a.runs} fresh mounts\n")
    print("| measurement | median | runs |")
    print("|---|---|---|")
    for k in keys:
        unit = "" if k.endswith("MiB") else " s"
        vals = [r[k] for r in runs]
        print(f"| {k} | {statistics.median(vals):.3f}{unit} | {', '.join(f'{v:.3f}' for v in vals)} |")
    print(f"\nload average per run: {'; '.join(r['load'] for r in runs)}")


if __name__ == "__main__":
    main()
