#!/usr/bin/python3
"""What one look at a layouts/fsdp-dp<W> folder costs the daemon (issue 40): its peak RSS while one
`stat` of `optimizer_0/.metadata` makes the plan, and the CPU of the first listing of
`pytorch_model_fsdp_0/` (W + 1 entries). The peak is the kernel's high-water mark of the daemon
(VmHWM), reset before each lookup through /proc/PID/clear_refs, so it is the lookup's own peak.

    /usr/bin/python3 bench/fsdp_meta.py [--zeromount build/zeromount] [--worlds 250 1000 65536]
                                        [--list-worlds 1024 4096 16002 65536]

Checkpoints (tests/tools/gen_ckpt.py, ZeRO-2 DP 2): "100x2000x2" is 100 tensors of 2000x2 (issue
40's 6 MB case), "3000" is 3,000 small parameters, "9" the listing's 9-parameter case.
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "tests", "tools", "gen_ckpt.py")


def status(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def checkpoint(work, name, args):
    src = f"{work}/{name}"
    if not os.path.exists(f"{src}/latest"):
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run(["/usr/bin/python3", GEN, src, "--stage", "2", "--dp", "2", *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return src


class Mount:
    def __init__(self, zeromount, src):
        self.mnt = tempfile.mkdtemp(prefix="zm-fsdp-")
        subprocess.run([zeromount, src, self.mnt], check=True, env={**os.environ, "ZEROMOUNT_NO_INDEX_CACHE": "1"})
        self.pid = int(subprocess.run(["pgrep", "-n", "-f", f"{src} {self.mnt}"], capture_output=True,
                                      text=True, check=True).stdout.split()[0])
        os.listdir(self.mnt)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        os.rmdir(self.mnt)


def peak_of_stat(zeromount, src, w):
    m = Mount(zeromount, src)
    try:
        idle = status(m.pid, "VmRSS")
        with open(f"/proc/{m.pid}/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        t0 = time.time()
        try:
            size = os.stat(f"{m.mnt}/layouts/fsdp-dp{w}/optimizer_0/.metadata").st_size
        except OSError as e:
            size = f"refused ({e.strerror})"
        dt = time.time() - t0
        return idle, status(m.pid, "VmHWM"), size, dt
    finally:
        m.close()


def list_cpu(zeromount, src, w):
    m = Mount(zeromount, src)
    try:
        before = cpu_s(m.pid)
        n = len(os.listdir(f"{m.mnt}/layouts/fsdp-dp{w}/pytorch_model_fsdp_0"))
        subprocess.run(["ls", "-l", f"{m.mnt}/layouts/fsdp-dp{w}/pytorch_model_fsdp_0"], check=True,
                       stdout=subprocess.DEVNULL)
        return n, cpu_s(m.pid) - before
    finally:
        m.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeromount", default=os.path.join(os.path.dirname(HERE), "build", "zeromount"))
    ap.add_argument("--work", default="/tmp/zm-fsdp-meta")
    ap.add_argument("--worlds", type=int, nargs="+", default=[250, 1000, 65536])
    ap.add_argument("--list-worlds", type=int, nargs="+", default=[1024, 4096, 16002, 65536])
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    sources = {
        "100x2000x2": checkpoint(a.work, "t100", ["--sizes", ",".join(["2000x2"] * 100)]),
        "3000": checkpoint(a.work, "p3000", ["--params", "3000", "--numel-min", "16", "--numel-max", "128"]),
    }
    print(f"binary: {a.zeromount}\n")
    print("| checkpoint | W | daemon RSS idle (MiB) | peak during the stat (MiB) | .metadata size | stat (s) |")
    print("|---|---|---|---|---|---|")
    for name, src in sources.items():
        for w in a.worlds:
            idle, peak, size, dt = peak_of_stat(a.zeromount, src, w)
            print(f"| {name} | {w:,} | {idle:.0f} | {peak:.0f} | {size if isinstance(size, str) else f'{size:,}'} "
                  f"| {dt:.2f} |", flush=True)
    small = checkpoint(a.work, "p9", ["--params", "9"])
    print("\n| W | entries | daemon CPU of the first listing (s) |")
    print("|---|---|---|")
    for w in a.list_worlds:
        n, cpu = list_cpu(a.zeromount, small, w)
        print(f"| {w:,} | {n:,} | {cpu:.2f} |", flush=True)


if __name__ == "__main__":
    main()
