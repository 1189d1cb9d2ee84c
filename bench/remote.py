"""Checkpoints on object storage (issue 30): bytes and requests at an S3 server for each thing a
job does through zeromount over an S3 FUSE client, and the wall time beside downloading every
shard and converting. Nothing here asserts; tests/py/test_s3.py holds the goals as tests.

    sudo /usr/bin/python3 bench/remote.py --work /tmp/zm-remote [--size-mb 432] [--quick]

The stack is tests/py/s3stack.py: s3rver (tests/s3, `scripts/deps.sh` installs it) on loopback,
Debian's rclone 1.60 to upload and to mount, one rclone mount and one zeromount per simulated
node. Bytes are the body bytes the server wrote (an aborted range counts what was sent before the
client hung up), requests every request it answered. The checkpoint is tests/tools/gen_ckpt.py's ZeRO-3
at DP 4; a native load at W ranks reads what DeepSpeed's loader opens (spec §6.1-6.4: `latest`,
its model-state file, its optimizer file), all W nodes at once, each node told apart by rclone's
--user-agent. The converter row runs DeepSpeed's ds_to_universal.py in the oracle chroot
(shared/oracle, ORACLE_DIR) on a download of every shard; without it, only the download is timed."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "py"))
import s3stack  # noqa: E402
from s3stack import Rclone, Server, Zeromount  # noqa: E402

TAG = "global_step3"
ORACLE_DIR = os.environ.get("ORACLE_DIR", "/tmp/oracle")
ORACLE_ROOTFS = os.environ.get("ORACLE_ROOTFS", "/tmp/ds-oracle/rootfs")

BASE = ["--read-only", "--vfs-cache-mode", "off", "--dir-cache-time", "1m", "--no-checksum",
        "--use-server-modtime"]
SETTINGS = {
    # name: rclone mount options
    "rclone defaults (16M buffer, 128M doubling)": BASE,
    "--buffer-size 0, 1M doubling to 64M": BASE + ["--buffer-size", "0", "--vfs-read-chunk-size", "1M",
                                                   "--vfs-read-chunk-size-limit", "64M"],
    "--buffer-size 0, fixed 1M": BASE + ["--buffer-size", "0", "--vfs-read-chunk-size", "1M",
                                         "--vfs-read-chunk-size-limit", "1M"],
    "--buffer-size 0, fixed 256K": BASE + ["--buffer-size", "0", "--vfs-read-chunk-size", "256K",
                                           "--vfs-read-chunk-size-limit", "256K"],
    "--buffer-size 0, fixed 64K": BASE + ["--buffer-size", "0", "--vfs-read-chunk-size", "64K",
                                          "--vfs-read-chunk-size-limit", "64K"],
    "--vfs-cache-mode full": ["--read-only", "--vfs-cache-mode", "full", "--dir-cache-time", "1m",
                              "--no-checksum", "--use-server-modtime"],
}

IDLE_SETTING = "--buffer-size 0, fixed 256K"  # the idle minute is measured once, with these
lines = []


def out(s=""):
    print(s, flush=True)
    lines.append(s)


def mb(n):
    return f"{n / 1e6:.1f} MB"


def tree_size(p):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)


def by_agent(reqs, agent):
    return [r for r in reqs if (r.get("agent") or "").startswith(agent)]


def read_all(path):
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += len(b)


class Node:
    """One simulated node: an rclone mount (its own user agent) and a zeromount over it."""

    def __init__(self, rclone, work, name, opts, zm, cache=None, mnt=None):
        self.name = name
        self.remote = rclone.mount("big", mnt=mnt, opts=opts + ["--user-agent", name, "--cache-dir",
                                                                   os.path.join(work, "rclone-cache-" + name)])
        self.rclone = rclone
        self.z = Zeromount(zm, self.remote, work, cache=cache)

    def stop(self):
        self.z.stop()
        self.rclone.unmount(self.remote)


def native_load(server, rclone, work, zm, opts, world, ckpt):
    """W nodes at once, rank r on node r: (max per-rank ratio to its own ranges, bytes, requests, seconds)."""
    target = f"zero3-dp{world}-fp32"
    nodes = [Node(rclone, work, f"node{world}-{r}", opts, zm) for r in range(world)]
    try:
        mark = server.mark()
        own = [0] * world

        def rank(r):
            d = f"{nodes[r].z.mnt}/layouts/{target}"
            for n in ("latest", f"{TAG}/zero_pp_rank_{r}_mp_rank_00_model_states.pt",
                      f"{TAG}/zero_pp_rank_{r}_mp_rank_00_optim_states.pt"):
                read_all(f"{d}/{n}")
            # FUSE names the reading thread, so .zeromount/stats counts this thread's bytes.
            own[r] = nodes[r].z.stats()["pid"].get(threading.get_native_id(), 0)

        t0 = time.perf_counter()
        ths = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        secs = time.perf_counter() - t0
        reqs = server.requests(mark)
        ratios = [sum(q["sent"] for q in by_agent(reqs, nodes[r].name)) / max(own[r], 1) for r in range(world)]
        return max(ratios), sum(q["sent"] for q in reqs), len(reqs), secs, sum(own)
    finally:
        for n in nodes:
            n.stop()


def measure(server, rclone, work, zm, label, opts, ckpt, worlds, idle_s):
    out(f"\n### {label}\n\n`rclone mount s3:ckpt/big MNT {' '.join(opts)}`\n")
    out("| action | requests | bytes fetched | x checkpoint | notes |")
    out("|---|---|---|---|---|")

    def row(what, n, b, note=""):
        out(f"| {what} | {n} | {mb(b)} | {b / ckpt:.3f} | {note} |")

    # Each action on a fresh node (a new rclone mount has none of the last one's pages cached), on
    # one mount point, as a node's /mnt/s3 is: the index cache is keyed by the path.
    cache = tempfile.mkdtemp(prefix="cache-", dir=work)
    at = tempfile.mkdtemp(prefix="s3mnt-", dir=work)
    mark = server.mark()
    node = Node(rclone, work, "solo", opts, zm, cache=cache, mnt=at)
    n, b = server.totals(mark)
    row("mount, no index cache (rclone mount + zeromount)", n, b)
    mark = server.mark()
    t0 = time.perf_counter()
    subprocess.run(["ls", "-lR", node.z.mnt], stdout=subprocess.DEVNULL, check=True)
    n, b = server.totals(mark)
    row("`ls -lR` of the view", n, b, f"{time.perf_counter() - t0:.2f} s")
    node.stop()
    mark = server.mark()
    node = Node(rclone, work, "solo", opts, zm, cache=cache, mnt=at)
    n, b = server.totals(mark)
    row("second mount (index cache; new rclone mount)", n, b)
    node.stop()
    node = Node(rclone, work, "solo", opts, zm, cache=cache, mnt=at)
    try:
        mark = server.mark()
        t0 = time.perf_counter()
        uni = f"{node.z.mnt}/{TAG}_universal"
        got = read_all(f"{uni}/zero/optimizer_state.pt") + read_all(f"{uni}/zero_pp_rank_0_mp_rank_00_model_states.pt")
        for p in sorted(os.listdir(f"{uni}/zero")):
            if os.path.isdir(f"{uni}/zero/{p}"):
                for f in sorted(os.listdir(f"{uni}/zero/{p}")):
                    got += read_all(f"{uni}/zero/{p}/{f}")
        n, b = server.totals(mark)
        row("universal load, one rank (every file a universal load opens)", n, b,
            f"{mb(got)} of files, {time.perf_counter() - t0:.1f} s")
        node.stop()
        node = Node(rclone, work, "solo", opts, zm, cache=cache, mnt=at)
        mark = server.mark()
        t0 = time.perf_counter()
        got = sum(read_all(os.path.join(node.z.mnt, f"{TAG}_fp32", f)) for f in os.listdir(f"{node.z.mnt}/{TAG}_fp32"))
        n, b = server.totals(mark)
        row(f"weights folder (`{TAG}_fp32/`, every file)", n, b, f"{mb(got)} of files, {time.perf_counter() - t0:.1f} s")
    finally:
        node.stop()
    for w in worlds:
        worst, b, n, secs, own = native_load(server, rclone, work, zm, opts, w, ckpt)
        row(f"native load `layouts/zero3-dp{w}-fp32`, {w} nodes at once", n, b,
            f"worst rank {worst:.3f}x its own ranges; all ranks' own ranges {mb(own)}; {secs:.1f} s")
    if idle_s:
        node = Node(rclone, work, "idle", opts, zm)
        try:
            mark = server.mark()
            end = time.monotonic() + idle_s
            while time.monotonic() < end:  # a job waiting for the next save: lists the view every 5 s
                os.listdir(node.z.mnt)
                os.path.exists(f"{node.z.mnt}/global_step99")
                time.sleep(5)
            n, b = server.totals(mark)
            row(f"idle {idle_s} s, the view listed every 5 s (default rescan on FUSE: 60 s)", n, b)
        finally:
            node.stop()


def download_then_convert(rclone, work, ckpt):
    out("\n### Download every shard, then convert (one node)\n")
    dl_root = os.path.join(ORACLE_ROOTFS, "tmp") if os.path.exists(os.path.join(ORACLE_ROOTFS, ".oracle-ready")) \
        else work
    dl = tempfile.mkdtemp(prefix="dl-", dir=dl_root)
    try:
        t0 = time.perf_counter()
        rclone.run("copy", "s3:ckpt/big", dl, "--transfers", "4")
        secs = time.perf_counter() - t0
        out(f"`rclone copy s3:ckpt/big DIR --transfers 4`: {mb(tree_size(dl))} in {secs:.1f} s")
        if dl_root == work or not os.path.exists(os.path.join(ORACLE_DIR, "run_in_env.sh")):
            out("ds_to_universal.py: not run (no DeepSpeed oracle chroot, ORACLE_DIR / ORACLE_ROOTFS)")
            return
        inside = "/tmp/" + os.path.basename(dl)
        t0 = time.perf_counter()
        r = subprocess.run([os.path.join(ORACLE_DIR, "run_in_env.sh"), "python3",
                            "/ds/deepspeed/checkpoint/ds_to_universal.py", "--input_folder", f"{inside}/{TAG}",
                            "--output_folder", f"{inside}/{TAG}_universal"], capture_output=True, text=True)
        csecs = time.perf_counter() - t0
        out(f"`ds_to_universal.py --input_folder DIR/{TAG} --output_folder DIR/{TAG}_universal` (DeepSpeed "
            f"0.19.6, oracle chroot): rc {r.returncode}, {csecs:.1f} s"
            + ("" if r.returncode == 0 else f": {(r.stderr or r.stdout)[-300:]!r}"))
        out(f"download + convert: {secs + csecs:.1f} s on every node, then the load reads the local copy")
    finally:
        shutil.rmtree(dl, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/zm-remote")
    ap.add_argument("--zeromount", default=os.path.join(REPO, "build", "zeromount"))
    ap.add_argument("--size-mb", type=int, default=432, help="about this much optimizer state")
    ap.add_argument("--quick", action="store_true", help="two settings, W = 2 and 4, no idle minute")
    ap.add_argument("--settings", nargs="*", help="only these SETTINGS names (default: all)")
    ap.add_argument("--idle", type=int, default=60)
    a = ap.parse_args()
    if s3stack.missing():
        sys.exit(s3stack.missing())
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    ckpt_dir = os.path.join(a.work, "big")
    params = max(4, a.size_mb // 27)  # 1.5-3 M elements each, 12 bytes per element (fp32, exp_avg, exp_avg_sq)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "tools", "gen_ckpt.py"), ckpt_dir, "--stage", "3", "--dp", "4",
                    "--params", str(params), "--numel-min", "1500000", "--numel-max", "3000000", "--groups", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    ckpt = tree_size(ckpt_dir)
    server = Server(a.work)
    rclone = Rclone(server, a.work)
    try:
        rclone.upload(ckpt_dir, "big")
        out(f"checkpoint: tests/tools/gen_ckpt.py ZeRO-3, DP 4, {params} params of 1.5-3 M elements, {mb(ckpt)} "
            f"({len(os.listdir(os.path.join(ckpt_dir, TAG)))} shard files); "
            f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
        settings = a.settings or (list(SETTINGS)[1:4:2] if a.quick else list(SETTINGS))
        worlds = [2, 4] if a.quick else [2, 4, 8]
        for name in settings:
            measure(server, rclone, a.work, a.zeromount, name, SETTINGS[name], ckpt, worlds,
                    a.idle if (name == IDLE_SETTING and not a.quick) else 0)
        download_then_convert(rclone, a.work, ckpt)
    finally:
        rclone.stop()
        server.stop()
    with open(os.path.join(a.work, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
