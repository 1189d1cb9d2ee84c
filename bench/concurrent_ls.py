#!/usr/bin/env python3
"""Does a listing wait while the first lookup of a layouts/ target makes its plan? (issue 40's
tidy-up: plans are made under the tree's exclusive lock, the first decode of the tag's model-state
pickle included.) A 20,000-parameter ZeRO-3 source at DP 8 is mounted; one thread looks up a file of
a `layouts/` target never looked at (the plan), while another lists the mount's root and the tag
folder in a loop. Prints the lookup's time and the listings' latency during it and on a quiet mount.

  sudo /usr/bin/python3 bench/concurrent_ls.py --work /tmp/zm-cls [--params 20000]
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listings(mnt, tag, stop, out):
    while not stop.is_set():
        t = time.monotonic()
        os.listdir(mnt)
        os.listdir(f"{mnt}/{tag}")
        out.append((t, time.monotonic() - t))


def ms(x):
    return f"{x * 1000:.1f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/zm-cls")
    ap.add_argument("--params", type=int, default=20000)
    ap.add_argument("--exe", default=os.path.join(REPO, "build", "zeromount"))
    ap.add_argument("--targets", nargs="+", default=["zero3-dp64-fp32", "zero2-dp16-fp32", "fsdp-dp32"])
    a = ap.parse_args()
    src, mnt = f"{a.work}/src{a.params}", f"{a.work}/mnt"
    if not os.path.isdir(src):
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "tools", "gen_ckpt.py"), src, "--stage", "3",
                        "--dp", "8", "--params", str(a.params)], check=True)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
    env = dict(os.environ, XDG_CACHE_HOME=f"{a.work}/cache")
    subprocess.run([a.exe, src, mnt], check=True, env=env)
    try:
        tag = open(f"{src}/latest").read().strip()
        os.listdir(mnt)  # the first fill of the root (report pages sized, ...): not what is measured
        time.sleep(2)
        quiet = []
        stop = threading.Event()
        th = threading.Thread(target=listings, args=(mnt, tag, stop, quiet))
        th.start()
        time.sleep(2)
        stop.set()
        th.join()
        q = [d for _, d in quiet]
        print(f"source: {a.params} parameters, ZeRO-3 at DP 8 ({src})")
        print(f"quiet mount: {len(q)} listings (root + tag folder), median {ms(statistics.median(q))}, "
              f"max {ms(max(q))}")
        print("| first lookup of | lookup | listings during it | their median | their max |")
        print("|---|---|---|---|---|")
        for target in a.targets:
            first = "__0_0.distcp" if target.startswith("fsdp") else "zero_pp_rank_0_mp_rank_00_optim_states.pt"
            path = f"{mnt}/layouts/{target}"
            path = f"{path}/optimizer_0/{first}" if target.startswith("fsdp") else f"{path}/{tag}/{first}"
            seen = []
            stop = threading.Event()
            th = threading.Thread(target=listings, args=(mnt, tag, stop, seen))
            th.start()
            time.sleep(0.3)
            t0 = time.monotonic()
            try:
                os.stat(path)
            except OSError as e:
                print(f"{path}: {e}")
            t1 = time.monotonic()
            time.sleep(0.3)
            stop.set()
            th.join()
            during = [d for t, d in seen if t < t1 and t + d > t0]
            print(f"| `layouts/{target}` | {ms(t1 - t0)} | {len(during)} | "
                  f"{ms(statistics.median(during)) if during else '-'} | {ms(max(during)) if during else '-'} |")
    finally:
        subprocess.run(["fusermount3", "-u", mnt])


if __name__ == "__main__":
    main()
