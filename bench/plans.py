#!/usr/bin/python3
"""What layout plans cost the daemon (issue 29 item 2): a mount of a many-parameter checkpoint made
by tests/tools/gen_ckpt.py, then `ls -l` of N layout targets' tag folders one after the other (each makes
its plan); after each, the daemon's RSS (/proc/PID/status VmRSS) and what .zeromount/stats says
the kept plans weigh (plan_bytes, plans_kept; at most 8 within 64 MiB).

    /usr/bin/python3 bench/plans.py [--params 20000] [--stage 3] [--dp 2] [--targets 8]
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def stats(mnt):
    out = {}
    for line in open(f"{mnt}/.zeromount/stats"):
        k, _, v = line.partition(" ")
        if k in ("plans_kept", "plan_bytes"):
            out[k] = int(v)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeromount", default=os.path.join(os.path.dirname(HERE), "build", "zeromount"))
    ap.add_argument("--work", default="/tmp/zm-plans")
    ap.add_argument("--params", type=int, default=20000)
    ap.add_argument("--stage", type=int, default=3)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--targets", type=int, default=8)
    a = ap.parse_args()
    src = f"{a.work}/z{a.stage}_dp{a.dp}_{a.params}"
    if not os.path.exists(f"{src}/latest"):
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run(["/usr/bin/python3", f"{HERE}/../tests/tools/gen_ckpt.py", src, "--stage", str(a.stage), "--dp", str(a.dp),
                        "--params", str(a.params), "--numel-min", "16", "--numel-max", "128"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mnt = tempfile.mkdtemp(prefix="zm-plans-mnt-")
    subprocess.run([a.zeromount, src, mnt], check=True, env={**os.environ, "ZEROMOUNT_NO_INDEX_CACHE": "1"})
    try:
        pid = int(subprocess.run(["pgrep", "-n", "-f", f"zeromount {src} {mnt}"], capture_output=True, text=True,
                                 check=True).stdout.split()[0])
        tag = open(f"{src}/latest").read().strip()
        os.listdir(mnt)
        print(f"{a.params:,} parameters, ZeRO-{a.stage} DP {a.dp} source; daemon RSS after the mount: "
              f"{rss_mib(pid):.0f} MiB\n")
        print("| targets looked up | daemon RSS (MiB) | plans_kept | plan_bytes (MiB) | ls -l of the target (s) |")
        print("|---|---|---|---|---|")
        targets = [f"zero{1 + k % 3}-dp{3 + k}-fp32" for k in range(a.targets)]
        for k, t in enumerate(targets):
            t0 = time.monotonic()
            subprocess.run(["ls", "-l", f"{mnt}/layouts/{t}/{tag}"], check=True, stdout=subprocess.DEVNULL)
            dt = time.monotonic() - t0
            s = stats(mnt)
            print(f"| {k + 1} (`{t}`) | {rss_mib(pid):.0f} | {s['plans_kept']} | {s['plan_bytes'] / 2**20:.1f} | "
                  f"{dt:.2f} |", flush=True)
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        os.rmdir(mnt)


if __name__ == "__main__":
    main()
