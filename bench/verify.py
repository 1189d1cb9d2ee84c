#!/usr/bin/env python3
"""The rate of `zeromount verify`'s pass from the page cache (issue 42): the checkpoint's bytes
verified per second (the files' size over the wall time of the command), beside the bytes the
report says its pass read (--json bytes_read: each byte once since the fused pass; a build before
it counted a record's bytes once for its CRC and again for its numbers) and the CPU time (user +
system, which a shared machine's load does not inflate). Not a test: nothing asserts.

    /usr/bin/python3 bench/verify.py [--ckpt DIR] [--rounds 5] [--zeromount build/zeromount]

Without --ckpt it makes a dense checkpoint with tests/tools/gen_ckpt.py (ZeRO-2, DP 2, fp32 Adam,
about 0.8 GB of shards) in /tmp/zm-verify-bench. The first round warms the page cache and is not counted.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default="/tmp/zm-verify-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--zeromount", default=os.path.join(ROOT, "build", "zeromount"))
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.ckpt, "latest")):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "gen_ckpt.py"), a.ckpt, "--stage", "2",
                        "--dp", "2", "--sizes", "4096x4096,4096x4096,4096,30000x1024,4096"], check=True)
    shard_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(a.ckpt) for f in fs)
    rows = []
    for r in range(a.rounds + 1):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([a.zeromount, "verify", a.ckpt, "--json"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if p.returncode not in (0, 1):
            sys.exit(f"verify exited {p.returncode}:\n{p.stdout}{p.stderr}")
        rep = json.loads(p.stdout)
        if r:  # round 0 warms the page cache
            rows.append((wall, rep["bytes_read"], cpu))
    walls = [w for w, _, _ in rows]
    read = rows[0][1]
    med, best = statistics.median(walls), min(walls)
    cpu = statistics.median([c for _, _, c in rows])
    print(f"checkpoint {a.ckpt}: {shard_bytes / 1e9:.2f} GB of files; verify reads {read / 1e9:.2f} GB per pass")
    print("| pass, median (s) | GB/s (files / wall), median | best | GB/s (bytes read / wall) | CPU s, median |"
          " rounds (s) |\n|---|---|---|---|---|---|")
    print(f"| {med:.3f} | {shard_bytes / med / 1e9:.2f} | {shard_bytes / best / 1e9:.2f} | {read / med / 1e9:.2f} |"
          f" {cpu:.3f} | {', '.join(f'{w:.3f}' for w in walls)} |")


if __name__ == "__main__":
    main()
