#!/usr/bin/env python3
"""The cost of deep folders (issue 27 item 9): a chain of N nested one-letter folders, mounted
alone, walked with `find` three times. The first walk fills every folder; later ones list folders
already filled, each a rescan once the rescan period has passed (1 s by default). For each walk it
prints the wall time and the CPU the daemon (zm-serve) spent, system and user, read from
/proc/<pid>/stat before and after. A folder's cost should not grow with its depth: per walk, the
daemon's CPU should grow as N, not N^2 or N^3.

  sudo /usr/bin/python3 bench/deep.py [--work /tmp/zm-deep] [--depths 500 1000 2000] [--walks 3]

The chains are made once (with mkdirat, so a chain may be deeper than PATH_MAX) and kept in --work
for the next run. Needs root for FUSE and a built build/zeromount (ZM_BUILD_DIR to change)."""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from run import ZM, server_pid, unmount

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """(user, system) CPU seconds of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state): utime is field 14, stime field 15.
    utime, stime = int(fields[11]), int(fields[12])
    return utime / TICK, stime / TICK


def make_chain(path, depth):
    """path/d/d/.../d (depth folders below path), made relative to descriptors; a marker file at
    the bottom says the chain is complete."""
    done = os.path.join(path, ".complete")
    if os.path.exists(done):
        return
    os.makedirs(path, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            try:
                os.mkdir("d", dir_fd=fd)
            except FileExistsError:
                pass
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("the bottom\n")
    finally:
        os.close(fd)
    open(done, "w").close()


def walk(mnt):
    """find MNT: returns (seconds, entries listed)."""
    t0 = time.time()
    out = subprocess.run(["find", mnt], check=True, capture_output=True).stdout
    return time.time() - t0, out.count(b"\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/zm-deep")
    ap.add_argument("--depths", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--pause", type=float, default=1.2, help="seconds between walks (past the rescan period)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    print("| depth | walk | wall | daemon system CPU | daemon user CPU | entries |")
    print("|---|---|---|---|---|---|")
    for n in a.depths:
        src = os.path.join(a.work, f"chain-{n}")
        make_chain(src, n)
        mnt = tempfile.mkdtemp(dir=a.work, prefix="mnt-")
        try:
            subprocess.run([ZM, src, mnt], check=True, capture_output=True)
            pid = server_pid(mnt)
            total_u = total_s = 0.0
            for k in range(a.walks):
                if k:
                    time.sleep(a.pause)
                u0, s0 = cpu_seconds(pid)
                secs, entries = walk(mnt)
                u1, s1 = cpu_seconds(pid)
                total_u += u1 - u0
                total_s += s1 - s0
                print(f"| {n} | {k + 1} | {secs:.2f} s | {s1 - s0:.2f} s | {u1 - u0:.2f} s | {entries} |", flush=True)
            print(f"| {n} | all {a.walks} | | {total_s:.2f} s | {total_u:.2f} s | |", flush=True)
        finally:
            unmount(mnt)
            os.rmdir(mnt)


if __name__ == "__main__":
    sys.exit(main())
