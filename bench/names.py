#!/usr/bin/env python3
"""Memory against the number of distinct names looked up (issue 19): any user of a shared mount
can make the daemon look up any valid layouts/<target> name. Each name costs a partition plan
(O(params)) and a few inodes; the daemon keeps the plans of the last few targets only, and drops a
target's inodes once the kernel forgets them. This looks up N distinct targets of a 3,000-parameter
checkpoint, as `stat` does, then asks the kernel to let go of what it caches (drop_caches, root),
and prints the daemon's resident memory (VmRSS) at each point, and the time per name.

  sudo /usr/bin/python3 bench/names.py [--work /tmp/zm-names] [--names 2000 20000]
"""
import argparse
import os
import subprocess
import time

from run import Mount, gen


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")  # dentries and inodes: the kernel sends FORGET for what it let go of
    time.sleep(1.0)


def targets(n):
    """n distinct valid names: every stage and precision, then DP sizes upwards."""
    out, w = [], 1
    while len(out) < n:
        for t in (f"zero3-dp{w}-fp32", f"zero2-dp{w}-fp32", f"zero1-dp{w}-bf16", f"zero3-dp{w}-bf16"):
            out.append(t)
        w += 1
    return out[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/zm-names")
    ap.add_argument("--names", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--params", type=int, default=3000)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    ckpt = gen(a.work, f"z2_p{a.params}", "--stage", "2", "--dp", "8", "--params", str(a.params), "--numel-min",
               "16", "--numel-max", "256")
    print("| names | VmRSS idle | after the lookups | after drop_caches | per name |")
    print("|---|---|---|---|---|")
    for n in a.names:
        with Mount(ckpt, a.work) as m:
            os.listdir(m.m)
            layouts = os.path.join(m.m, "layouts")
            os.listdir(layouts)
            drop_caches()
            idle = rss_mib(m.pid)
            t0 = time.time()
            for name in targets(n):
                os.stat(os.path.join(layouts, name, "latest"))
            per = (time.time() - t0) / n
            held = rss_mib(m.pid)
            drop_caches()
            after = rss_mib(m.pid)
            print(f"| {n} | {idle:.1f} MiB | {held:.1f} MiB (+{held - idle:.1f}) | {after:.1f} MiB (+{after - idle:.1f}) "
                  f"| {per * 1000:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
