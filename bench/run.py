"""The benchmark suite (bench/README.md): one command, every figure measured in the same run.

    /usr/bin/python3 bench/run.py [--work /tmp/zm-bench] [--quick]

Needs a built tree (build/zeromount, build/bench/zm_bench), root for FUSE, g++ and libfuse3-dev to
build bench/benchfs.cpp (the minimal FUSE filesystem that sets the ceiling), and
optionally the DeepSpeed oracle chroot of the shared/oracle scripts (ORACLE_ROOTFS) for the converter
comparison. Prints a Markdown table; asserts nothing."""
import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("ZM_BUILD_DIR", os.path.join(ROOT, "build"))
ZM = os.path.join(BUILD, "zeromount")
ZMB = os.path.join(BUILD, "bench", "zm_bench")
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
ORACLE_ROOTFS = os.environ.get("ORACLE_ROOTFS", "/tmp/ds-oracle/rootfs")
ORACLE_DIR = os.environ.get("ORACLE_DIR", "/tmp/oracle")
ROWS = []


def row(what, value, note=""):
    ROWS.append((what, value, note))
    print(f"| {what} | {value} | {note} |", flush=True)


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def mounted(m):
    return any(l.split()[1] == m for l in open("/proc/self/mounts"))


def unmount(m):
    subprocess.run(["fusermount3", "-u", m], capture_output=True)
    if mounted(m):
        subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)


def server_pid(m):
    """The newest zm-serve process serving m (an older one may still be exiting)."""
    for pid in sorted(filter(str.isdigit, os.listdir("/proc")), key=int, reverse=True):
        try:
            if (open(f"/proc/{pid}/comm").read().strip() == "zm-serve"
                    and m.encode() in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")):
                return int(pid)
        except OSError:
            pass
    return None


def vmhwm_mib(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmHWM:"):
            return int(l.split()[1]) / 1024
    return float("nan")


class Mount:
    def __init__(self, src, work, *args):
        self.src, self.args = src, args
        self.m = tempfile.mkdtemp(dir=work, prefix="mnt-")

    def __enter__(self):
        t0 = time.time()
        subprocess.run([ZM, self.src, self.m, *self.args], check=True)
        self.mount_seconds = time.time() - t0
        self.pid = server_pid(self.m)
        return self

    def rss(self):
        return vmhwm_mib(self.pid)

    def __exit__(self, *a):
        unmount(self.m)
        os.rmdir(self.m)


def files_under(d):
    out = []
    for dp, _, fs in os.walk(d):
        out += [os.path.join(dp, f) for f in sorted(fs)]
    return sorted(out)


def cat(paths, buf=1 << 17):
    """Reads files as `cat` does (128 KiB reads); returns bytes and seconds."""
    n, t0 = 0, time.time()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(buf)
                if not b:
                    break
                n += len(b)
    return n, time.time() - t0


def mbps(n, s):
    return n / 1e6 / s


def gen(work, name, *args):
    out = os.path.join(work, name)
    if not os.path.exists(os.path.join(out, "latest")):
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "tools", "gen_ckpt.py"), out, *args], check=True)
    return out


def warm(ckpt):
    cat(files_under(ckpt))


def build_benchfs(work):
    exe = os.path.join(work, "benchfs")
    if not os.path.exists(exe):
        flags = sh("pkg-config", "--cflags", "--libs", "fuse3").split()
        subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(ROOT, "bench", "benchfs.cpp"), *flags, "-o", exe], check=True)
    return exe


def benchfs_read(exe, backing, work, keep_cache, read_ahead_kb=0):
    m = tempfile.mkdtemp(dir=work, prefix="bfs-")
    args = [exe, m, f"--backing={backing}", "-f", "--mode=copy"] + (["--keep_cache"] if keep_cache else [])
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if mounted(m):
                break
            time.sleep(0.02)
        os.stat(m)  # after INIT
        if read_ahead_kb:
            dev = [l.split()[2] for l in open("/proc/self/mountinfo") if l.split()[4] == m][0]
            with open(f"/sys/class/bdi/{dev}/read_ahead_kb", "w") as f:
                f.write(str(read_ahead_kb))
        first = cat([os.path.join(m, "data0")])
        second = cat([os.path.join(m, "data0")]) if keep_cache else None
        return first, second
    finally:
        unmount(m)
        p.wait(timeout=10)
        os.rmdir(m)


def full_read(ckpt, work, label, exe, backing):
    """1: every file of <T>_universal through the mount, first and second pass, vs benchfs."""
    warm(ckpt)
    direct = cat(glob.glob(os.path.join(ckpt, "*", "*optim_states.pt")))
    bfs_default, _ = benchfs_read(exe, backing, work, keep_cache=False)
    bfs_ra, _ = benchfs_read(exe, backing, work, keep_cache=False, read_ahead_kb=1024)
    bfs_first = max(bfs_default, bfs_ra, key=lambda r: mbps(*r))  # the stricter ceiling
    _, bfs_second = benchfs_read(exe, backing, work, keep_cache=True)
    with Mount(ckpt, work) as mt:
        files = files_under(os.path.join(mt.m, "global_step3_universal"))
        first = cat(files)
        second = cat(files)
        rss = mt.rss()
    row(f"{label}: universal read, 1st pass (cat)", f"{mbps(*first):.0f} MB/s",
        f"{first[0] / 2**30:.2f} GiB in {len(files)} files; benchfs 1st {mbps(*bfs_default):.0f} MB/s "
        f"(read_ahead_kb 1024: {mbps(*bfs_ra):.0f}) -> "
        f"**{mbps(*first) / mbps(*bfs_first):.2f}x** of the FUSE ceiling; direct cat of shards {mbps(*direct):.0f} MB/s "
        f"-> {mbps(*first) / mbps(*direct):.2f}x")
    row(f"{label}: universal read, 2nd pass (keep_cache)", f"{mbps(*second):.0f} MB/s",
        f"benchfs keep_cache 2nd {mbps(*bfs_second):.0f} MB/s -> **{mbps(*second) / mbps(*bfs_second):.2f}x**; "
        f"direct -> {mbps(*second) / mbps(*direct):.2f}x")
    row(f"{label}: daemon peak RSS, full read", f"{rss:.0f} MiB", "VmHWM of the serving process")
    with Mount(ckpt, work) as mt:
        files = [f for f in files_under(os.path.join(mt.m, "global_step3_universal")) if f.endswith(".pt")]
        code = ("import dsstub, sys, time, torch; t=time.time(); n=0\n"
                "for p in sys.argv[1:]:\n    torch.load(p, weights_only=False); n+=1\n"
                "print(time.time()-t)")
        r = subprocess.run(["/usr/bin/python3", "-c", code, *files], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "tests", "py")))
        if r.returncode != 0:
            raise RuntimeError("torch.load pass failed: " + r.stderr[-2000:])
        secs = float(r.stdout.split()[-1])
        row(f"{label}: universal read as torch.load, 1st pass", f"{mbps(first[0], secs):.0f} MB/s", f"{len(files)} files in {secs:.2f} s")
    return first


def zero3_pattern(ckpt, work, label, W):
    """2: W readers each read every state file of every parameter (ZeRO-3's universal load),
    against one reader reading them once, both on a fresh mount."""
    code = "import sys\nfor p in sys.argv[1:]:\n    open(p,'rb').read()\n"

    def state_files(m):
        return [f for f in files_under(os.path.join(m, "global_step3_universal", "zero")) if not f.endswith("step.pt")]

    with Mount(ckpt, work) as mt:
        one = cat(state_files(mt.m))
    with Mount(ckpt, work) as mt:
        files = state_files(mt.m)
        t0 = time.time()
        procs = [subprocess.Popen(["/usr/bin/python3", "-c", code, *random.Random(k).sample(files, len(files))]) for k in range(W)]
        for p in procs:
            p.wait()
        secs = time.time() - t0
        rss = mt.rss()
    row(f"{label}: ZeRO-3 load pattern, {W} readers x every state file", f"{secs:.2f} s",
        f"one reader once: {one[1]:.2f} s -> **{secs / one[1]:.2f}x** (target <= 1.5x); {W} x {one[0] / 2**30:.2f} GiB delivered at "
        f"{mbps(W * one[0], secs):.0f} MB/s in total; daemon peak RSS {rss:.0f} MiB")


def readiness(ckpt, work, label, runs=5):
    """3 and 5: command start to the first byte of a universal file, without and with the index
    cache; and the first byte of a random universal file on a cold daemon."""
    cache = tempfile.mkdtemp(dir=work, prefix="xdg-")
    results = {}
    for mode in ("no cache", "cache"):
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        if mode == "no cache":
            env["ZEROMOUNT_NO_INDEX_CACHE"] = "1"
        else:
            subprocess.run([ZM, "inspect", ckpt], env=env, check=True, capture_output=True)  # fills the cache
        times, ttfb, probe = [], [], None
        for k in range(runs):
            m = tempfile.mkdtemp(dir=work, prefix="rdy-")
            t0 = time.time()
            subprocess.run([ZM, ckpt, m], check=True, env=env)
            if probe is None:
                probe = sorted(os.listdir(os.path.join(m, "global_step3_universal", "zero")))[:-1]
            with open(os.path.join(m, "global_step3_universal", "zero", probe[0], "fp32.pt"), "rb") as f:
                f.read(1)
            times.append(time.time() - t0)
            p = random.Random(k).choice(probe)
            t1 = time.time()
            with open(os.path.join(m, "global_step3_universal", "zero", p, "exp_avg.pt"), "rb") as f:
                f.read(1)
            ttfb.append((time.time() - t1) * 1000)
            unmount(m)
            os.rmdir(m)
        results[mode] = (times, ttfb)
    for mode, (times, ttfb) in results.items():
        row(f"{label}: mount readiness, {mode} (start to first byte)", f"{statistics.median(times):.3f} s",
            f"median of {runs}; min {min(times):.3f} s (target <= 1 s)")
    row(f"{label}: first byte of a random universal file, cold daemon", f"{statistics.median(results['cache'][1]):.2f} ms",
        f"median of {runs}")
    shutil.rmtree(cache, ignore_errors=True)


def safetensors_stream(ckpt, work, label):
    """4: daemon peak RSS while a reader streams <T>_fp32/model.safetensors."""
    with Mount(ckpt, work) as mt:
        n, s = cat([os.path.join(mt.m, "global_step3_fp32", "model.safetensors")], buf=1 << 20)
        rss = mt.rss()
    row(f"{label}: model.safetensors stream", f"{mbps(n, s):.0f} MB/s", f"{n / 2**30:.2f} GiB; daemon peak RSS **{rss:.0f} MiB**")


def export(ckpt, work, label):
    out = os.path.join(work, "exported")
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", ZM, "export", ckpt, out], check=True, capture_output=True, text=True)
    secs = time.time() - t0
    rss = int(r.stderr.strip().splitlines()[-1]) / 1024
    size = sum({os.stat(f).st_ino: os.stat(f).st_size for f in files_under(out)}.values())  # hard links once
    shutil.rmtree(out)
    row(f"{label}: zeromount export (universal)", f"{secs:.2f} s", f"peak RSS {rss:.0f} MiB; extra disk {size / 2**30:.2f} GiB (the output; model-state aliases are hard links)")
    return secs


def converter(ckpt_in_chroot, host_ckpt, work, label):
    """6: DeepSpeed's ds_to_universal.py on the same checkpoint, in the oracle chroot."""
    if not os.path.exists(os.path.join(ORACLE_ROOTFS, ".oracle-ready")):
        row(f"{label}: ds_to_universal.py", "not run", "no oracle chroot (ORACLE_ROOTFS)")
        return
    out_in = ckpt_in_chroot + "/global_step3_universal_ds"
    out_host = os.path.join(ORACLE_ROOTFS, out_in.lstrip("/"))
    shutil.rmtree(out_host, ignore_errors=True)
    code = ("import resource, subprocess, sys, time; t=time.time(); "
            "r=subprocess.run(sys.argv[1:]); "
            "print('RESULT', r.returncode, time.time()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    peak_disk = [0]

    def watch(stop):
        while not stop:
            try:
                peak_disk[0] = max(peak_disk[0], int(sh("du", "-sb", out_host).split()[0]))
            except Exception:
                pass
            time.sleep(0.5)

    import threading
    stop = []
    th = threading.Thread(target=watch, args=(stop,), daemon=True)
    th.start()
    r = subprocess.run([os.path.join(ORACLE_DIR, "run_in_env.sh"), "python3", "-c", code, "python3",
                        "/ds/deepspeed/checkpoint/ds_to_universal.py", "--input_folder", ckpt_in_chroot + "/global_step3",
                        "--output_folder", out_in], capture_output=True, text=True)
    stop.append(1)
    th.join()
    res = [l for l in r.stdout.splitlines() if l.startswith("RESULT")]
    if not res:
        row(f"{label}: ds_to_universal.py", "failed", (r.stderr or r.stdout)[-300:].replace("\n", " "))
        return
    _, rc, secs, rss = res[-1].split()
    row(f"{label}: ds_to_universal.py (4 extract / 2 merge workers)", f"{float(secs):.1f} s",
        f"rc {rc}; peak RSS of one worker {int(rss) / 1024:.0f} MiB; peak extra disk {peak_disk[0] / 2**30:.2f} GiB")
    shutil.rmtree(out_host, ignore_errors=True)
    return float(secs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/zm-bench")
    ap.add_argument("--quick", action="store_true", help="small checkpoints only")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores, {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB, "
          f"{os.uname().release}; {time.strftime('%Y-%m-%d %H:%M')}")
    print("| measurement | figure | notes |\n|---|---|---|")
    small3 = gen(a.work, "z3_10k_w64", "--stage", "3", "--dp", "64", "--params", "10000", "--numel-min", "1", "--numel-max", "2000")
    small2 = gen(a.work, "z2_10k_w64", "--stage", "2", "--dp", "64", "--params", "10000", "--numel-min", "1", "--numel-max", "2000")
    for ck, lab in ((small3, "ZeRO-3 10k params x 64"), (small2, "ZeRO-2 10k params x 64")):
        out = sh(ZMB, "index", ck, "5").strip()
        row(f"{lab}: index build (pickles only)", out.split("median ")[1].split()[0] + " s", out)
        row(f"{lab}: pickle parse", sh(ZMB, "parse", ck).split(": ", 1)[1].strip(), "")
    readiness(small3, a.work, "ZeRO-3 10k params x 64")
    readiness(small2, a.work, "ZeRO-2 10k params x 64")
    # Large checkpoints live where the oracle chroot can see them too.
    big_root = os.path.join(ORACLE_ROOTFS, "zm-bench") if os.path.isdir(ORACLE_ROOTFS) else a.work
    os.makedirs(big_root, exist_ok=True)
    n3, n2 = ("40", "40") if a.quick else ("300", "110")
    big3 = gen(big_root, f"z3_big{n3}_w8", "--stage", "3", "--dp", "8", "--params", n3, "--numel-min", "800000", "--numel-max", "1600000")
    big2 = gen(big_root, f"z2_big{n2}_w8", "--stage", "2", "--dp", "8", "--params", n2, "--numel-min", "800000", "--numel-max", "1600000")
    exe = build_benchfs(a.work)
    for ck, lab in ((big3, "ZeRO-3 W=8 large"), (big2, "ZeRO-2 W=8 large")):
        out = sh(ZMB, "index", ck, "5").strip()
        row(f"{lab}: index build", out.split("median ")[1].split()[0] + " s", out + " (time follows the pickles, not the tensors)")
        # benchfs serves one file of as many bytes as the optimizer shards hold, so that both sides
        # fill the same amount of FUSE page cache (reading 4 GiB is slower than 0.5 GiB on any FUSE fs).
        backing = os.path.join(a.work, "backing-" + os.path.basename(ck))
        if not os.path.exists(backing):
            with open(backing, "wb") as out:
                for f in sorted(glob.glob(os.path.join(ck, "*", "*optim_states.pt"))):
                    with open(f, "rb") as src:
                        shutil.copyfileobj(src, out, 1 << 24)
        full_read(ck, a.work, lab, exe, backing)
        print(sh(ZMB, "vfile", ck).strip())
        zero3_pattern(ck, a.work, lab, 8)
        safetensors_stream(ck, a.work, lab)
    secs_export = export(big2, a.work, "ZeRO-2 W=8 large")
    with Mount(big2, a.work) as mt:
        # What ds_to_universal.py writes: zero/ and one copy of the model states.
        u = os.path.join(mt.m, "global_step3_universal")
        n, s = cat(files_under(os.path.join(u, "zero")) + [os.path.join(u, "mp_rank_00_model_states.pt")])
        row("ZeRO-2 W=8 large: mount + full universal read", f"{mt.mount_seconds + s:.2f} s",
            f"{n / 2**30:.2f} GiB (zero/ and the model states, what ds_to_universal.py writes); peak RSS {mt.rss():.0f} MiB; extra disk 0")
    conv = converter("/" + os.path.relpath(big2, ORACLE_ROOTFS), big2, a.work, "ZeRO-2 W=8 large")
    if conv:
        row("converter vs mount + full read", f"{conv / (mt.mount_seconds + s):.1f}x faster", f"export: {conv / secs_export:.1f}x faster")
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump(ROWS, f, indent=1)


if __name__ == "__main__":
    main()
