#!/usr/bin/python3
"""Index cost against the number of parameters (issue 29): `zeromount inspect` wall time and peak
RSS, without the index cache, on checkpoints made by tests/tools/gen_ckpt.py with many small tensors (the
shape of a Mixture-of-Experts model written one module per expert: 18-40k parameters), ZeRO-2 and
ZeRO-3, at DP 8 and 64. Checkpoints are generated once into --work and kept.

    /usr/bin/python3 bench/scale.py [--params 5000 10000 20000 40000 100000] [--dps 8 64] [--stages 2 3]
"""
import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeromount", default=os.path.join(os.path.dirname(HERE), "build", "zeromount"))
    ap.add_argument("--work", default="/tmp/zm-scale")
    ap.add_argument("--params", type=int, nargs="+", default=[5000, 10000, 20000, 40000, 100000])
    ap.add_argument("--dps", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--stages", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per cell; the median is shown")
    a = ap.parse_args()
    print("| stage | DP | params | inspect, no index cache (median s) | peak RSS (MiB) | s per 10k params |")
    print("|---|---|---|---|---|---|")
    for stage in a.stages:
        for dp in a.dps:
            for n in a.params:
                src = f"{a.work}/z{stage}_dp{dp}_{n}"
                if not os.path.exists(f"{src}/latest"):
                    shutil.rmtree(src, ignore_errors=True)
                    subprocess.run(["/usr/bin/python3", f"{HERE}/../tests/tools/gen_ckpt.py", src, "--stage", str(stage), "--dp",
                                    str(dp), "--params", str(n), "--numel-min", "16", "--numel-max", "128"],
                                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times, rss = [], 0
                for _ in range(a.repeat):
                    cache = tempfile.mkdtemp()  # no index cache: every run indexes
                    t0 = time.perf_counter()
                    p = subprocess.Popen([a.zeromount, "inspect", src], stdout=subprocess.DEVNULL,
                                         env=dict(os.environ, XDG_CACHE_HOME=cache))
                    _, status, ru = os.wait4(p.pid, 0)
                    times.append(time.perf_counter() - t0)
                    rss = max(rss, ru.ru_maxrss)
                    shutil.rmtree(cache)
                    assert os.waitstatus_to_exitcode(status) == 0, src
                t = sorted(times)[len(times) // 2]
                print(f"| {stage} | {dp} | {n:,} | {t:.2f} | {rss / 1024:.0f} | {t / n * 1e4:.2f} |", flush=True)


if __name__ == "__main__":
    main()
