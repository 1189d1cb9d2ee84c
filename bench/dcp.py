#!/usr/bin/python3
"""DCP loads through the mount against the floor (issue 28): FSDP2 jobs of W ranks load
MNT/layouts/fsdp-dp<W>/ (Accelerate's pytorch_model_fsdp_0/ + optimizer_0/) and, side by side in the
same run, a real FSDP2 DCP checkpoint of the same state saved by torch on local disk (the floor),
in alternating rounds; medians per rank. Bytes each rank took from the shards come from
MNT/.zeromount/stats and are set against that rank's data file (__<rank>_0.distcp of both folders:
what it must read). Real torch 2.x in the oracle chroot (shared/oracle/README.md); the source is
bench/resume.py's 63.7M-parameter ZeRO-3 DP-2 checkpoint, trained once by the oracle.

Run as root on the host:  /usr/bin/python3 bench/dcp.py [--worlds 2 4] [--rounds 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE, ROOTFS = "/tmp/oracle", "/tmp/ds-oracle/rootfs"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeromount", default=os.path.join(os.path.dirname(HERE), "build", "zeromount"))
    ap.add_argument("--sizes", default="32768,1024,5000")
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    name = f"z3_dp2_{a.sizes.replace(',', 'x')}"
    work = f"{ORACLE}/out/resume"
    src = f"{work}/ckpt/{name}"
    if not os.path.exists(f"{src}/latest"):
        os.makedirs(src, exist_ok=True)
        os.makedirs(f"{work}/meta/{name}", exist_ok=True)
        sh(["./run_in_env.sh", "python3", "harness/launch.py", "--nproc", "2", "--timeout", "1800",
            "harness/oracle_train.py", "--stage", "3", "--save-dir", f"/oracle/out/resume/ckpt/{name}",
            "--meta-dir", f"/oracle/out/resume/meta/{name}"], cwd=ORACLE,
           env=dict(os.environ, ORACLE_EXTRA_ENV=f"ORACLE_SIZES={a.sizes}"), stdout=subprocess.DEVNULL)
    shutil.copy(os.path.join(HERE, "dcp_load.py"), f"{ORACLE}/dcp_load.py")
    mnt = f"{ROOTFS}/zm-mnt/dcp_bench"
    os.makedirs(mnt, exist_ok=True)
    sh([a.zeromount, src, mnt], stderr=subprocess.DEVNULL)
    rows = []
    try:
        tag = open(f"{src}/latest").read().strip()
        src_bytes = sum(os.path.getsize(f"{src}/{tag}/{f}") for f in os.listdir(f"{src}/{tag}"))
        for w in a.worlds:
            floor = f"{work}/dcp_floor/{name}/w{w}"
            os.makedirs(floor, exist_ok=True)
            out = f"{work}/dcp_bench_w{w}.json"
            t0 = time.time()
            sh(["./run_in_env.sh", "python3", "harness/launch.py", "--nproc", str(w), "--timeout", "1800",
                "/oracle/dcp_load.py", "/zm-mnt/dcp_bench", str(w), floor.replace(ORACLE, "/oracle"),
                str(a.rounds), out.replace(ORACLE, "/oracle")], cwd=ORACLE,
               env=dict(os.environ, ORACLE_EXTRA_ENV=f"ORACLE_SIZES={a.sizes}"), stdout=subprocess.DEVNULL)
            # Bytes: a fresh mount (no page of it cached by the kernel), one load, stats per rank.
            subprocess.run(["fusermount3", "-u", mnt])
            sh([a.zeromount, src, mnt], stderr=subprocess.DEVNULL)
            cold = f"{work}/dcp_bench_w{w}_bytes.json"
            sh(["./run_in_env.sh", "python3", "harness/launch.py", "--nproc", str(w), "--timeout", "1800",
                "/oracle/dcp_load.py", "/zm-mnt/dcp_bench", str(w), floor.replace(ORACLE, "/oracle"), "1",
                cold.replace(ORACLE, "/oracle"), "bytes"], cwd=ORACLE,
               env=dict(os.environ, ORACLE_EXTRA_ENV=f"ORACLE_SIZES={a.sizes}"), stdout=subprocess.DEVNULL)
            for r in range(w):
                res = json.load(open(out.replace(".json", f".rank{r}.json")))
                b = json.load(open(cold.replace(".json", f".rank{r}.json")))
                need = sum(os.path.getsize(f"{mnt}/layouts/fsdp-dp{w}/{d}/__{r}_0.distcp")
                           for d in ("pytorch_model_fsdp_0", "optimizer_0"))
                fl = statistics.median(x["floor"] for x in res["rounds"])
                mo = statistics.median(x["mount"] for x in res["rounds"])
                rows.append((w, r, fl, mo, b["bytes"], need, b["cold_mount_s"]))
            print(f"W={w}: {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
    print(f"source: {src}/{tag}, ZeRO-3 DP 2, {src_bytes / 2**20:.0f} MiB; medians of {a.rounds} alternating rounds")
    print("| W | rank | floor: dcp.load of torch's own FSDP2 save, warm (s) | mount: layouts/fsdp-dp<W>, warm (s) |"
          " mount / floor | fresh mount (s) | bytes from the shards, fresh mount | its data files | bytes / data |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w, r, fl, mo, took, need, cold in rows:
        print(f"| {w} | {r} | {fl:.2f} | {mo:.2f} | {mo / fl:.2f}x | {cold:.2f} | {took / 2**20:.1f} MiB | "
              f"{need / 2**20:.1f} MiB | {took / need:.2f} |")


if __name__ == "__main__":
    main()
