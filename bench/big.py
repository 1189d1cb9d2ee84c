#!/usr/bin/python3
"""Issue 14: a 70B-shaped checkpoint on one small machine (bench/README.md, last section).

    sudo /usr/bin/python3 bench/big.py [--ckpt z3=/tmp/zm70b/z3 --ckpt z12=/tmp/zm70b/z12] [--runs 3]

The checkpoints come from tests/tools/gen_ckpt.py --arch llama70b --sparse (tests/tools/README-gen.md). For
each, over --runs fresh mounts without and --runs with the index cache (a private
XDG_CACHE_HOME; "without" sets ZEROMOUNT_NO_INDEX_CACHE=1), it measures:
  ready     process start -> first successful stat of MNT/<T>_universal/zero/optimizer_state.pt
  RSS       VmRSS / VmHWM of the daemon (zm-serve) after the mount and after the ls -lR
  ls -lR    wall time of `ls -lR MNT/<T>_universal` (first listing of that mount)
  layouts   `stat MNT/layouts/zero3-dp4096-bf16` + `ls MNT/layouts/zero3-dp4096-bf16/<T>`
  read      first full read of one universal fp32.pt (the shards are holes: this is the path cost)
Shards are warm in the page cache (pickles only; the tensor bytes are holes). Prints a Markdown
table with medians, the targets, and the load average of every run. Asserts nothing."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from run import server_pid, unmount  # bench/run.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZM = os.path.join(os.environ.get("ZM_BUILD_DIR", os.path.join(ROOT, "build")), "zeromount")
LAYOUT = "zero3-dp4096-bf16"
READ_PARAM = "model.layers.0.self_attn.q_proj.weight"  # 8192x8192: 256 MiB of fp32


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def mem_mib(pid, log=None):
    out = {}
    try:
        status = open(f"/proc/{pid}/status").readlines()
    except OSError:
        tail = open(log).read()[-2000:] if log and os.path.exists(log) else ""
        raise SystemExit(f"the daemon {pid} is gone; its log ends with:\n{tail}")
    for line in status:
        k = line.split(":")[0]
        if k in ("VmHWM", "VmRSS"):
            out[k] = int(line.split()[1]) / 1024
    return out


def tag_of(ckpt):
    return open(os.path.join(ckpt, "latest")).read().strip()


def one_run(ckpt, mnt, env, extra, log):
    tag = tag_of(ckpt)
    probe = os.path.join(mnt, f"{tag}_universal", "zero", "optimizer_state.pt")
    r = {"load": load()}
    t0 = time.monotonic()
    p = subprocess.Popen([ZM, ckpt, mnt, "--log-file", log, *extra], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    while True:
        try:
            os.stat(probe)
            break
        except OSError:
            if p.poll() not in (None, 0):
                raise SystemExit(f"zeromount failed: {p.stderr.read().decode()}")
            time.sleep(0.001)
    r["ready"] = time.monotonic() - t0
    p.wait()
    pid = server_pid(mnt)
    r["mem_mount"] = mem_mib(pid, log)
    t = time.monotonic()
    out = subprocess.run(["ls", "-lR", os.path.join(mnt, f"{tag}_universal")], check=True,
                         capture_output=True).stdout
    r["lslR"] = time.monotonic() - t
    r["lslR_lines"] = out.count(b"\n")
    r["mem_ls"] = mem_mib(pid, log)
    t = time.monotonic()
    subprocess.run(["stat", os.path.join(mnt, "layouts", LAYOUT)], check=True, capture_output=True)
    names = subprocess.run(["ls", os.path.join(mnt, "layouts", LAYOUT, tag)], check=True,
                           capture_output=True).stdout.split()
    r["layouts"] = time.monotonic() - t
    r["layout_names"] = len(names)
    path = os.path.join(mnt, f"{tag}_universal", "zero", READ_PARAM, "fp32.pt")
    t = time.monotonic()
    n = 0
    with open(path, "rb", buffering=0) as f:
        first = f.read(1 << 20)
        r["ttfb_ms"] = (time.monotonic() - t) * 1000
        n = len(first)
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            n += len(b)
    r["read_s"] = time.monotonic() - t
    r["read_bytes"] = n
    r["mem_end"] = mem_mib(pid, log)
    r["load_end"] = load()
    unmount(mnt)
    return r


def med(rs, key, sub=None):
    vals = [x[key][sub] if sub else x[key] for x in rs]
    return statistics.median(vals), min(vals), max(vals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", action="append", help="LABEL=DIR (default z3 and z12 under /tmp/zm70b)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/zm70b/bench")
    ap.add_argument("-o", dest="opts", default=None, help="extra zeromount -o options")
    a = ap.parse_args()
    ckpts = [c.split("=", 1) for c in (a.ckpt or ["z3=/tmp/zm70b/z3", "z12=/tmp/zm70b/z12"])]
    os.makedirs(a.work, exist_ok=True)
    mnt = os.path.join(a.work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    unmount(mnt)
    extra = ["-o", a.opts] if a.opts else []
    print(f"zeromount {ZM}; {time.strftime('%Y-%m-%d %H:%M')}; uptime load at start: {load()}\n")
    print("| checkpoint | measurement | target | measured (median; min-max) | met |")
    print("|---|---|---|---|---|")
    for label, ckpt in ckpts:
        cache = os.path.join(a.work, f"xdg-{label}")
        shutil.rmtree(cache, ignore_errors=True)
        env_nc = dict(os.environ, XDG_CACHE_HOME=cache, ZEROMOUNT_NO_INDEX_CACHE="1")
        env_c = dict(os.environ, XDG_CACHE_HOME=cache)
        log = os.path.join(a.work, f"daemon-{label}.log")
        nc = [one_run(ckpt, mnt, env_nc, extra, log) for _ in range(a.runs)]
        one_run(ckpt, mnt, env_c, extra, log)  # fills the cache
        c = [one_run(ckpt, mnt, env_c, extra, log) for _ in range(a.runs)]
        allr = nc + c

        def line(what, target, m, unit, ok, fmt="{:.3f}"):
            v, lo, hi = m
            print(f"| {label} | {what} | {target} | {fmt.format(v)} {unit} ({fmt.format(lo)}-{fmt.format(hi)}) "
                  f"| {'yes' if ok(v) else '**no**'} |", flush=True)

        line("mount ready, no index cache", "<= 2 s", med(nc, "ready"), "s", lambda v: v <= 2)
        line("mount ready, index cache", "<= 0.5 s", med(c, "ready"), "s", lambda v: v <= 0.5)
        for key, when in (("mem_mount", "after mount"), ("mem_ls", "after ls -lR"), ("mem_end", "after the read")):
            line(f"daemon VmRSS {when}", "<= 256 MiB", med(allr, key, "VmRSS"), "MiB", lambda v: v <= 256, "{:.0f}")
        line("daemon VmHWM (peak), end", "<= 256 MiB", med(allr, "mem_end", "VmHWM"), "MiB", lambda v: v <= 256, "{:.0f}")
        line(f"ls -lR {tag_of(ckpt)}_universal ({allr[0]['lslR_lines']} lines)", "<= 5 s", med(allr, "lslR"), "s",
             lambda v: v <= 5)
        line(f"stat + ls layouts/{LAYOUT}/<T> ({allr[0]['layout_names']} names)", "<= 1 s", med(allr, "layouts"),
             "s", lambda v: v <= 1)
        mb = allr[0]["read_bytes"] / 2**20
        line(f"first read of {READ_PARAM}/fp32.pt ({mb:.0f} MiB), time", "-", med(allr, "read_s"), "s",
             lambda v: True)
        line("  its first MiB (time to first byte)", "-", med(allr, "ttfb_ms"), "ms", lambda v: True, "{:.1f}")
        print(f"| {label} | uptime load per run (start/end) | - | "
              f"{'; '.join(x['load'] + ' / ' + x['load_end'] for x in allr)} | - |", flush=True)
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
