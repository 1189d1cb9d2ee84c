#!/usr/bin/python3
"""First reads of the universal view (issue 14). Cold: its zero/ files read once after
`echo 3 > /proc/sys/vm/drop_caches`, against a cold `cat` of the shards and a cold read through
the minimal FUSE filesystem (bench/benchfs.cpp) of one file holding the same bytes. Warm shards,
fresh mount: against benchfs serving one file of the same bytes, and as many files as zero/ has
(`--files=K`, each of the mean size), which pays the same per-file cost (lookup, open, the
kernel's read-ahead window starting small in each file). Root only.

    sudo /usr/bin/python3 bench/cold.py --work /tmp/zm-cold [--zeromount OTHER_BINARY] [--runs 3]

`--zeromount` compares another build (e.g. one without the source read-ahead) in the same run.
Prints one Markdown table; nothing asserts.
"""
import argparse
import glob
import os
import shutil
import statistics
import time

import run as common  # bench/run.py: gen, Mount, cat, benchfs_read, ...


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def universal_files(m):
    return [f for f in common.files_under(os.path.join(m, "global_step3_universal", "zero")) if f.endswith(".pt")]


def zm_cold(binary, ckpt, work):
    common.ZM = binary
    drop_caches()
    with common.Mount(ckpt, work) as mt:  # the mount reads the pickles: cold too, not timed
        files = universal_files(mt.m)
        drop_caches()
        n, s = common.cat(files)
    return n, s, len(files)


def benchfs_files(exe, backing, work, k):
    """benchfs --files=K (every data file is the backing file): K files read once, as cat does."""
    m = common.tempfile.mkdtemp(dir=work, prefix="bfs-")
    p = common.subprocess.Popen([exe, m, f"--backing={backing}", "-f", "--mode=copy", f"--files={k}"],
                                stdout=common.subprocess.DEVNULL, stderr=common.subprocess.DEVNULL)
    try:
        for _ in range(200):
            if common.mounted(m):
                break
            time.sleep(0.02)
        os.stat(m)
        dev = [l.split()[2] for l in open("/proc/self/mountinfo") if l.split()[4] == m][0]
        with open(f"/sys/class/bdi/{dev}/read_ahead_kb", "w") as f:
            f.write("1024")  # what zeromount sets for its own mounts
        return common.cat([os.path.join(m, f"data{i}") for i in range(k)])
    finally:
        common.unmount(m)
        p.wait(timeout=10)
        os.rmdir(m)


def zm_warm(binary, ckpt, work):
    common.ZM = binary
    common.warm(ckpt)
    with common.Mount(ckpt, work) as mt:
        return common.cat(universal_files(mt.m))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/zm-cold")
    ap.add_argument("--zeromount", action="append", default=[], help="another binary to compare")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    binaries = [common.ZM] + a.zeromount
    exe = common.build_benchfs(a.work)
    print(f"load before: {open('/proc/loadavg').read().split()[:3]}\n")
    print("| source | reader | MB/s (median of runs) | runs | note |\n|---|---|---|---|---|")
    for stage in ("3", "2"):
        ck = common.gen(a.work, f"z{stage}_cold_w8", "--stage", stage, "--dp", "8", "--params", "110",
                        "--numel-min", "800000", "--numel-max", "1600000")
        shards = sorted(glob.glob(os.path.join(ck, "*", "*optim_states.pt")))
        backing = os.path.join(a.work, f"backing-z{stage}")
        if not os.path.exists(backing):
            with open(backing, "wb") as out:
                for f in shards:
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 24)
        label = f"ZeRO-{stage} W=8, 110 params"
        rates = {"cat of the shards": [], "benchfs (same bytes, one file)": []}
        for b in binaries:
            rates[f"zeromount {b}"] = []
        for _ in range(a.runs):
            drop_caches()
            rates["cat of the shards"].append(common.mbps(*common.cat(shards)))
            drop_caches()
            rates["benchfs (same bytes, one file)"].append(
                common.mbps(*common.benchfs_read(exe, backing, a.work, keep_cache=False, read_ahead_kb=1024)[0]))
            for b in binaries:
                n, s, files = zm_cold(b, ck, a.work)
                rates[f"zeromount {b}"].append(common.mbps(n, s))
        floor = statistics.median(rates["cat of the shards"])
        fuse = statistics.median(rates["benchfs (same bytes, one file)"])
        for reader, r in rates.items():
            med = statistics.median(r)
            note = "" if reader.startswith("cat") else f"{med / floor:.2f}x the cold cat; {med / fuse:.2f}x benchfs"
            if reader.startswith("zeromount"):
                note += f"; {files} files of zero/"
            print(f"| {label}, cold | {reader} | {med:.0f} | {', '.join(f'{x:.0f}' for x in r)} | {note} |")
        # Warm shards, fresh mounts: the FUSE ceiling at the same file count.
        per_file = os.path.join(a.work, f"backing-z{stage}-per-file")
        with common.Mount(ck, a.work) as mt:
            zfiles = universal_files(mt.m)
            total = sum(os.path.getsize(f) for f in zfiles)
        with open(per_file, "wb") as out, open(backing, "rb") as src:
            out.write(src.read(total // len(zfiles)))
        warm = {"benchfs, one file": [], f"benchfs, {len(zfiles)} files of the mean size": []}
        for b in binaries:
            warm[f"zeromount {b}"] = []
        for _ in range(a.runs):
            common.warm(ck)
            warm["benchfs, one file"].append(common.mbps(*common.benchfs_read(
                exe, backing, a.work, keep_cache=False, read_ahead_kb=1024)[0]))
            warm[f"benchfs, {len(zfiles)} files of the mean size"].append(
                common.mbps(*benchfs_files(exe, per_file, a.work, len(zfiles))))
            for b in binaries:
                warm[f"zeromount {b}"].append(common.mbps(*zm_warm(b, ck, a.work)))
        one = statistics.median(warm["benchfs, one file"])
        many = statistics.median(warm[f"benchfs, {len(zfiles)} files of the mean size"])
        for reader, r in warm.items():
            med = statistics.median(r)
            print(f"| {label}, warm shards | {reader} | {med:.0f} | {', '.join(f'{x:.0f}' for x in r)} | "
                  f"{med / one:.2f}x benchfs one file; {med / many:.2f}x benchfs {len(zfiles)} files |")
    print(f"\nload after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
