#!/usr/bin/python3
"""Time to resume (issue 14): how long until a training job that resumes at another ZeRO stage /
DP size has its state back, four ways, on one checkpoint, in one run.

  (a) ds_to_universal.py (default workers: 4 extract, 2 merge), then a universal load of its output;
  (b) zeromount SRC MNT, then a universal load through the mount (--load-dir MNT, which holds
      latest_universal and <tag>_universal);
  (c) zeromount SRC MNT, then a native load of MNT/layouts/<target>;
  (d) a native load of the unchanged checkpoint at its own stage and DP size (the floor);
  (e) with --native-floor: a native load of a checkpoint REALLY saved by DeepSpeed at the target
      layout (a real folder, no mount): what resuming at that layout costs when nothing is faked.
      It is made once per target, not timed, by the oracle's harness/resave.py, which validates it
      by a native load and zero_to_fp32.py: for a target in the source's stage family with
      --via universal-load (ds_to_universal.py, a universal load at the target, the patches for
      what DeepSpeed's universal load does not restore, save_checkpoint); otherwise, or if that
      fails, --via set-state (fresh engine at the target, the source run's live state written in
      with DeepSpeed's own safe_set_full_* API, save_checkpoint).  (set-state stops at its own
      check for ZeRO-3 targets of the default source: fc2.weight lp_vs_ref_fp32.)  Cached in WORK/native/<target>/ (WORK/native/<source name>/<target>/ for a non-default
      source).  (c)/(e) is the mount's real cost at that layout.
  (f) with --floor: (e)'s real checkpoint served through FUSE by bench/benchfs.cpp --tree (a plain
      read-only passthrough: pread + fuse_reply_buf, keep_cache, 1 MiB max_read, as zeromount
      serves), so that what FUSE itself costs on this machine is told apart from what the mount
      adds. --floor runs only (c), (e) and (f) for each target, a warm-up round then --repeat
      rounds (default 3) whose order alternates (c e f, then f e c), and prints the medians.

Loads are real DeepSpeed (the oracle in /tmp/oracle, see its README.md): harness/launch.py starts
the ranks of harness/oracle_load.py inside the oracle chroot, through a small wrapper that this
script writes (timed_load.py) and that only records timestamps: process start, imports done,
deepspeed.initialize, and the start and end of engine.load_checkpoint (plus, inside load_checkpoint,
the time spent in torch.load and the rank's /proc/self/io rchar).  Nothing in DeepSpeed or the
harness is changed.

Wall time of a path = from the start of its first step (mount, or ds_to_universal.py, or the
launcher for (d) and (e)) to the moment the LAST rank's engine.load_checkpoint returned (host and chroot
share one clock).  The harness's own comparison with the live state and its extra training step
run after that and are not counted; the process exit time is in the JSON ("exit_s").

A load counts only if the comparison with the live state passed (result JSON): native loads need
status "ok"; universal loads may show only DeepSpeed 0.19.6's own documented defects
(/tmp/oracle/README.md): frozen parameters and buffers not restored, ZeRO-3 group 0's
weight_decay in every group, and for ZeRO-1/2 targets safe_get_full_fp32_param returning an Adam
moment (or, for a parameter split between ranks, a mix of both) while the module weights
(lp_vs_ref_fp32) are right.  exp_avg, exp_avg_sq, module weights
and the step counters must match.

Bytes from the shards: MNT/.zeromount/stats (bytes_from_shards N, requests N, pid P bytes N lines),
read before and after each load through a mount and diffed per pid (pids mapped to ranks by the
wrapper's records).  If the binary has no such file: "n/a".  Besides, always: the daemon's own
/proc/PID/io rchar (what it read from the shards with read/pread) and each rank's rchar during
load_checkpoint.

Run as root on the host:  /usr/bin/python3 bench/resume.py [--quick] [--cold] ...
Every mount it makes is unmounted in a finally block.
"""
import argparse
import json
import statistics
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

ORACLE = "/tmp/oracle"            # bound at /oracle inside the chroot
ROOTFS = "/tmp/ds-oracle/rootfs"  # the chroot; mounts under ROOTFS/zm-mnt are visible inside
ALL_TARGETS = ["zero1-dp2-fp32", "zero2-dp2-fp32", "zero3-dp2-fp32",
               "zero1-dp4-fp32", "zero2-dp4-fp32", "zero3-dp4-fp32"]

# The wrapper run by each rank instead of oracle_load.py: it records times, then runs oracle_load.py
# unchanged (runpy).
WRAPPER = r'''
import json, os, sys, time, runpy
T_START = time.time()
def _io():
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (l.split(":") for l in f)}
import torch
import deepspeed
from deepspeed.runtime.engine import DeepSpeedEngine
rec = {"pid": os.getpid(), "rank": int(os.environ.get("RANK", 0)), "t_start": T_START,
       "t_imported": time.time(), "cpu_imported": time.process_time(),
       "torch_load": {"calls": 0, "seconds": 0.0, "bytes": 0}}
OUT = os.environ["ZM_TIMES"] + ".rank%d.json" % rec["rank"]
def _dump():
    with open(OUT + ".tmp", "w") as f:
        json.dump(rec, f)
    os.replace(OUT + ".tmp", OUT)
_dump()
_in_load = [False]
_torch_load = torch.load
def _timed_torch_load(f, *a, **k):
    if not _in_load[0]:
        return _torch_load(f, *a, **k)
    t = time.time()
    try:
        return _torch_load(f, *a, **k)
    finally:
        tl = rec["torch_load"]
        dt = time.time() - t
        tl["calls"] += 1
        tl["seconds"] += dt
        try:
            n = os.path.getsize(f)
        except Exception:
            n = None
        tl["bytes"] += n or 0
        tl.setdefault("files", []).append([str(f)[-90:], round(dt, 3), n])
torch.load = _timed_torch_load
_initialize = deepspeed.initialize
def _timed_initialize(*a, **k):
    rec["t_init_start"] = time.time()
    try:
        return _initialize(*a, **k)
    finally:
        rec["t_init_end"] = time.time()
deepspeed.initialize = _timed_initialize
_load_checkpoint = DeepSpeedEngine.load_checkpoint
def _timed_load_checkpoint(self, *a, **k):
    rec["io_before"] = _io()
    rec["t_load_start"] = time.time()
    rec["cpu_load_start"] = time.process_time()
    _in_load[0] = True
    try:
        r = _load_checkpoint(self, *a, **k)
        rec["load_ok"] = True
        return r
    except BaseException as e:
        rec["load_ok"] = False
        rec["load_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
        raise
    finally:
        _in_load[0] = False
        rec["t_load_end"] = time.time()
        rec["cpu_load_end"] = time.process_time()
        rec["io_after"] = _io()
        _dump()
DeepSpeedEngine.load_checkpoint = _timed_load_checkpoint
sys.argv = ["/oracle/harness/oracle_load.py"] + sys.argv[1:]
runpy.run_path("/oracle/harness/oracle_load.py", run_name="__main__")
'''


def log(msg):
    print(f"[resume {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def chroot_path(host_path):
    """Path of a host path inside the chroot (/tmp/oracle -> /oracle, ROOTFS/x -> /x)."""
    host_path = os.path.abspath(host_path)
    if host_path == ORACLE or host_path.startswith(ORACLE + "/"):
        return "/oracle" + host_path[len(ORACLE):]
    if host_path.startswith(ROOTFS + "/"):
        return host_path[len(ROOTFS):]
    raise SystemExit(f"{host_path} is not visible inside the oracle chroot (put --work under {ORACLE})")


def run_env(cmd, log_path, extra_env="", timeout=1200, cpu=None):
    """./run_in_env.sh CMD in its own process group; returns (rc, seconds, t_start, t_end).
    cpu (a dict), if given, gets the CPU seconds of every process of the command ("cpu_s")."""
    env = dict(os.environ, ORACLE_EXTRA_ENV=extra_env)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    with open(log_path, "w") as lf:
        lf.write(f"cd {ORACLE} && ORACLE_EXTRA_ENV='{extra_env}' ./run_in_env.sh {' '.join(cmd)}\n")
        lf.flush()
        p = subprocess.Popen(["./run_in_env.sh"] + cmd, cwd=ORACLE, env=env, stdout=lf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except BaseException:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group this call started, by its id
            except ProcessLookupError:
                pass
            p.wait()
            raise
    t1 = time.time()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu["cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return rc, t1 - t0, t0, t1


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# ---------------------------------------------------------------- mounts and the daemon

class FuseMount:
    """A FUSE file system at MNT: up() clears a stale mount there, starts it (_start) and returns the
    seconds until the folder answers; down() unmounts it."""

    def __init__(self, mnt):
        self.mnt = mnt

    def up(self):
        os.makedirs(self.mnt, exist_ok=True)
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-u", self.mnt], check=True)
        t0 = time.time()
        self._start(t0)
        os.listdir(self.mnt)  # the mount answers
        return time.time() - t0

    def down(self):
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-u", self.mnt])


class Mount(FuseMount):
    def __init__(self, zm, src, mnt):
        super().__init__(mnt)
        self.zm, self.src = zm, src
        self.mounted = False

    def _start(self, t0):
        r = subprocess.run([self.zm, self.src, self.mnt], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"zeromount failed: {r.stderr.strip()}")
        self.mounted = True

    def down(self):
        if self.mounted:
            super().down()
        self.mounted = False

    def daemon_pid(self):
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0].decode(errors="replace")) == "zeromount" and \
                    self.mnt.encode() in argv:
                try:  # the serving process is the one holding /dev/fuse (not its waiting parent)
                    if any(os.readlink(f"/proc/{d}/fd/{fd}") == "/dev/fuse" for fd in os.listdir(f"/proc/{d}/fd")):
                        return int(d)
                except OSError:
                    pass
        return None

    def daemon_rchar(self):
        pid = self.daemon_pid()
        if pid is None:
            return None
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (l.split(":") for l in f)}["rchar"]

    def stats(self):
        """MNT/.zeromount/stats parsed, or None if this binary has no such file."""
        path = os.path.join(self.mnt, ".zeromount", "stats")
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            return None
        out = {"bytes_from_shards": None, "requests": None, "pids": {}}
        for line in text.splitlines():
            w = line.split()
            if len(w) == 2 and w[0] in ("bytes_from_shards", "requests"):
                out[w[0]] = int(w[1])
            elif len(w) >= 4 and w[0] == "pid" and w[2] == "bytes":
                out["pids"][int(w[1])] = int(w[3])
        return out


def stats_diff(before, after, pid_rank):
    if before is None or after is None:
        return "n/a"
    per = {}
    for pid, n in after["pids"].items():
        d = n - before["pids"].get(pid, 0)
        if d:
            per[f"rank{pid_rank[pid]}" if pid in pid_rank else f"pid {pid}"] = d
    return {"bytes_from_shards": (after["bytes_from_shards"] or 0) - (before["bytes_from_shards"] or 0),
            "requests": (after["requests"] or 0) - (before["requests"] or 0),
            "per_opener": per}


# ---------------------------------------------------------------- one load

KNOWN_UNIVERSAL_DEFECTS = "frozen parameters / buffers not restored; ZeRO-3 group 0 weight_decay; " \
    "ZeRO-1/2 safe_get_full_fp32_param returns an Adam moment"


def check_result(res, universal, target_stage):
    """(passed, why) for one load's result JSON."""
    if res is None:
        return False, "no result JSON"
    if res.get("optimizer_state_steps") != [3.0]:
        return False, f"optimizer steps {res.get('optimizer_state_steps')}"
    bad = res["mismatches"]
    if not universal:
        return (res["status"] == "ok" and not bad), ("ok" if not bad else f"mismatches {bad}")
    cmp = res["compare"]
    unexplained = []
    for m in bad:
        name, _, kind = m.rpartition(".")
        if kind in ("frozen", "buffer"):
            continue  # DeepSpeed's universal load never restores them
        if m == "optimizer.param_groups.weight_decay" and target_stage == 3:
            continue  # ZeRO-3 universal load: group 0's hyper-parameters in every group
        if kind == "fp32" and target_stage < 3 and cmp[name]["lp_vs_ref_fp32"]["ok"] \
                and cmp[name]["exp_avg"]["ok"] and cmp[name]["exp_avg_sq"]["ok"]:
            # map_to_flat_opt_states: the fp32 view returns Adam moments (for a parameter split between
            # ranks, a mix: each rank's state key order follows its own string-hash seed); the module
            # weight and both moments are right
            continue
        unexplained.append(m)
    if unexplained:
        return False, f"unexplained mismatches {unexplained}"
    return True, "ok (only DeepSpeed's documented universal-load defects)" if bad else "ok"


def run_load(cfg, name, nproc, stage, load_dir, universal, t_path_start, mount=None, tag=None):
    """Launch the ranks of oracle_load.py (through the timing wrapper); returns a record."""
    d = os.path.join(cfg.run_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cd = chroot_path(d)
    cmd = ["python3", "harness/launch.py", "--nproc", str(nproc), "--timeout", "900", chroot_path(cfg.wrapper)]
    if not universal:
        cmd.append("--native")
    cmd += ["--stage", str(stage), "--load-dir", load_dir, "--reference", chroot_path(cfg.reference),
            "--result", f"{cd}/r.json"]
    if tag:
        cmd += ["--tag", tag]
    env = f"ORACLE_SIZES={cfg.sizes} ZM_TIMES={cd}/times"
    st0 = mount.stats() if mount else None
    dr0 = mount.daemon_rchar() if mount else None
    la = loadavg()
    rc, secs, t0, t1 = run_env(cmd, os.path.join(d, "log.txt"), env)
    st1 = mount.stats() if mount else None
    dr1 = mount.daemon_rchar() if mount else None
    ranks = []
    for k in range(nproc):
        p = os.path.join(d, f"times.rank{k}.json")
        ranks.append(json.load(open(p)) if os.path.exists(p) else None)
    res = json.load(open(os.path.join(d, "r.json"))) if os.path.exists(os.path.join(d, "r.json")) else None
    errs = []
    for k in range(nproc):
        p = os.path.join(d, f"r.json.rank{k}.err.json")
        if os.path.exists(p):
            e = json.load(open(p))
            errs.append(f"rank{k} {e['phase']}: {e['error_type']}: {e['error'][:200]}")
    pid_rank = {r["pid"]: r["rank"] for r in ranks if r}
    rec = {"name": name, "nproc": nproc, "stage": stage, "universal": universal, "load_dir": load_dir, "rc": rc,
           "loadavg_before": la, "launch_s": secs, "errors": errs, "dir": d}
    done = [r for r in ranks if r and "t_load_end" in r]
    if len(done) == nproc and all(r.get("load_ok") for r in done):
        last = max(done, key=lambda r: r["t_load_end"])
        rec.update({
            "wall_s": last["t_load_end"] - t_path_start,
            "exit_s": t1 - t_path_start,
            "before_launch_s": t0 - t_path_start,   # mount or ds_to_universal.py, 0 for (d)
            # critical path (the rank whose load_checkpoint ended last), from the launch:
            "to_python_start_s": last["t_start"] - t0,           # run_in_env.sh, chroot, launch.py
            "imports_s": last["t_imported"] - last["t_start"],    # import torch, deepspeed
            "init_s": last["t_load_start"] - last["t_imported"],  # init_distributed, model, deepspeed.initialize
            "ds_initialize_s": last["t_init_end"] - last["t_init_start"],
            "load_checkpoint_s": last["t_load_end"] - last["t_load_start"],
            "load_checkpoint_s_per_rank": [r["t_load_end"] - r["t_load_start"] for r in done],
            "torch_load_s_per_rank": [r["torch_load"]["seconds"] for r in done],
            "torch_load_calls_per_rank": [r["torch_load"]["calls"] for r in done],
            "rank_rchar_during_load": [r["io_after"]["rchar"] - r["io_before"]["rchar"] for r in done],
            # CPU seconds of all ranks from process start to the end of load_checkpoint (less sensitive to
            # other users' load than wall time), and inside load_checkpoint
            "cpu_to_load_end_s": sum(r["cpu_load_end"] for r in done),
            "cpu_imports_s": sum(r["cpu_imported"] for r in done),
            "cpu_load_checkpoint_s": sum(r["cpu_load_end"] - r["cpu_load_start"] for r in done),
        })
        passed, why = check_result(res, universal, stage)
    else:
        passed = False
        why = "; ".join(errs) or next((r.get("load_error") for r in done if r.get("load_error")), None) \
            or f"rc {rc}, no load timestamps"
        rec["exit_s"] = t1 - t_path_start
    rec["passed"], rec["check"] = passed, why
    if res:
        rec["result_status"], rec["mismatches"] = res["status"], res["mismatches"]
        rec["harness_seconds"] = res["seconds"]
    rec["stats"] = stats_diff(st0, st1, pid_rank) if mount else None
    rec["daemon_rchar"] = (dr1 - dr0) if (dr0 is not None and dr1 is not None) else None
    log(f"  {name}: rc={rc} passed={passed} wall={rec.get('wall_s', float('nan')):.1f}s "
        f"exit={rec['exit_s']:.1f}s load_checkpoint={rec.get('load_checkpoint_s', float('nan')):.1f}s ({why[:120]})")
    return rec


# ---------------------------------------------------------------- the four paths

def target_params(t):
    m = re.fullmatch(r"zero([123])-dp(\d+)-fp32", t)
    if not m:
        raise SystemExit(f"target {t}: only zero<S>-dp<N>-fp32")
    return int(m.group(1)), int(m.group(2))


def same_family(a, b):
    return (a == 3) == (b == 3)


def path_d(cfg, rnd):
    t0 = time.time()
    return run_load(cfg, f"{rnd}/d_floor", cfg.src_dp, cfg.src_stage, chroot_path(cfg.src), False, t0)


def native_ok(rec, name):
    """A resave.py record usable as (e)'s source: made from this source, validated by a native load."""
    try:
        return (rec["status"] == "made" and rec["source"]["fixture"] == name
                and rec["validation"]["native_load"]["status"] == "ok")
    except (KeyError, TypeError):
        return False


def make_native(cfg, target):
    """A real native checkpoint at `target`, saved by DeepSpeed (resave.py --via universal-load within the
    source's stage family, else or on failure --via set-state), made once and cached in
    cfg.native_root/<target>/ (+ <target>.json, resave.py's record). Not timed."""
    root = cfg.native_root
    out, rec_path = os.path.join(root, target), os.path.join(root, target + ".json")
    info = {"dir": out, "record": rec_path}
    if os.path.exists(rec_path) and os.path.exists(os.path.join(out, "latest")):
        rec = json.load(open(rec_path))
        if native_ok(rec, cfg.name):
            info.update(cached=True, ok=True, made_s=rec.get("seconds"), method=rec.get("method", "universal-load"))
            log(f"  native {target}: cached in {out}")
    if "ok" not in info:
        # resave.py wants a fixture folder (checkpoint/, meta/); relative links, so they resolve inside the chroot too
        fx = os.path.join(root, "fixture", cfg.name)
        os.makedirs(fx, exist_ok=True)
        for sub, real in (("checkpoint", cfg.src), ("meta", cfg.meta)):
            link = os.path.join(fx, sub)
            if os.path.islink(link):
                os.remove(link)
            os.symlink(os.path.relpath(real, fx), link)
        stage, _ = target_params(target)
        methods = (["universal-load", "set-state"] if same_family(cfg.src_stage, stage) else ["set-state"])
        tried = []
        for via in methods:
            if via == "universal-load" and not os.path.exists(os.path.join(fx, "ds_to_universal", "latest_universal")):
                uni = os.path.join(fx, "ds_to_universal")
                shutil.rmtree(uni, ignore_errors=True)
                os.makedirs(uni)
                rc, secs, _, _ = run_env(["python3", "/ds/deepspeed/checkpoint/ds_to_universal.py", "--input_folder",
                                          chroot_path(os.path.join(cfg.src, cfg.tag)), "--output_folder",
                                          chroot_path(os.path.join(uni, cfg.tag + "_universal"))],
                                         os.path.join(root, f"dsu_{cfg.name}.log"))
                log(f"  native: ds_to_universal.py for resave.py's universal load: rc={rc} {secs:.1f}s")
            log(f"  native {target}: making it (resave.py --via {via}, then its validation), not timed")
            cmd = ["python3", "harness/resave.py", "--via", via, "--fixture", chroot_path(fx), "--target", target,
                   "--out-root", chroot_path(root), "--work", chroot_path(os.path.join(root, "work", cfg.name))]
            rc, secs, _, _ = run_env(cmd, os.path.join(root, f"make_{cfg.name}_{target}_{via}.log"),
                                     f"ORACLE_SIZES={cfg.sizes}", timeout=1800)
            rec = json.load(open(rec_path)) if os.path.exists(rec_path) else None
            info.update(cached=False, ok=rc == 0 and native_ok(rec, cfg.name), made_s=secs, rc=rc, method=via)
            if not info["ok"]:
                info["error"] = (rec or {}).get("error") or \
                    ((rec or {}).get("validation") or {}).get("native_load", {}).get("error") or f"rc {rc}, see the log"
                tried.append(f"{via}: {info['error'][:300]}")
            log(f"  native {target}: {via} rc={rc} ok={info['ok']} {secs:.1f}s"
                f"{'' if info['ok'] else ' ' + info['error'][:200]}")
            if info["ok"]:
                break
        if tried:
            info["failed_attempts"] = tried
    if info["ok"]:
        z = rec["validation"].get("zero_to_fp32", {})
        info["zero_to_fp32_equal_to_live_state"] = z.get("equal_to_live_state")
        tag = open(os.path.join(out, "latest")).read().strip()
        info["files"] = {f: os.path.getsize(os.path.join(out, tag, f)) for f in sorted(os.listdir(os.path.join(out, tag)))}
        info["bytes"] = sum(info["files"].values())
    return info


def path_e(cfg, rnd, target):
    info = cfg.native.get(target)
    if not info or not info["ok"]:
        return {"passed": False, "check": f"no real native checkpoint at {target}: "
                f"{(info or {}).get('error', 'not made')}"}
    stage, dp = target_params(target)
    t0 = time.time()
    return run_load(cfg, f"{rnd}/e_{target}", dp, stage, chroot_path(info["dir"]), False, t0)


class FloorMount(FuseMount):
    """bench/benchfs.cpp --tree=DIR at MNT: a real folder through a minimal FUSE passthrough."""

    def __init__(self, exe, tree, mnt):
        super().__init__(mnt)
        self.exe, self.tree, self.proc = exe, tree, None

    def _start(self, t0):
        self.proc = subprocess.Popen([self.exe, self.mnt, f"--tree={self.tree}", "--mode=copy", "--keep_cache",
                                      f"--max_read={1 << 20}", "-f"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() - t0 > 30:
                raise RuntimeError(f"benchfs did not mount {self.mnt}")
            time.sleep(0.01)

    def down(self):
        super().down()
        if self.proc:
            self.proc.wait(timeout=30)


def path_f(cfg, rnd, target):
    info = cfg.native.get(target)
    if not info or not info["ok"]:
        return {"passed": False, "check": f"no real native checkpoint at {target}"}
    stage, dp = target_params(target)
    m = FloorMount(cfg.benchfs, info["dir"], cfg.mnt + "-floor")
    t0 = time.time()
    try:
        mount_s = m.up()
        rec = run_load(cfg, f"{rnd}/f_{target}", dp, stage, chroot_path(m.mnt), False, t0)
        rec["mount_s"] = mount_s
        return rec
    finally:
        m.down()


def run_floor_round(cfg, rnd, targets, reverse):
    """(c), (e) and (f) for each target, in the order c e f, or f e c when `reverse`."""
    log(f"round {rnd}: targets {targets}, order {'f e c' if reverse else 'c e f'}, load {loadavg()}")
    out = {"targets": {}, "loadavg_start": loadavg(), "order": "fec" if reverse else "cef"}
    run = {"c": lambda t: path_mount(cfg, rnd, t, "c"), "e": lambda t: path_e(cfg, rnd, t),
           "f": lambda t: path_f(cfg, rnd, t)}
    for t in targets:
        out["targets"][t] = {k: run[k](t) for k in (("f", "e", "c") if reverse else ("c", "e", "f"))}
    out["loadavg_end"] = loadavg()
    return out


def floor_table(rounds):
    """Medians over the measured rounds: the checkpoint work (mount, then the last rank's
    load_checkpoint; (e) has no mount), the wall from the first step, and the CPU of all ranks in
    load_checkpoint."""
    def med(recs, key):
        v = [key(r) for r in recs if r.get("passed") and "load_checkpoint_s" in r]
        return (statistics.median(v), len(v)) if v else (None, 0)

    def work(r):
        return r.get("before_launch_s", 0.0) + r["load_checkpoint_s"]

    def f(x):
        return "-" if x is None else f"{x:.2f}"

    def q(x, y):
        return "-" if x is None or y is None else f"{x / y:.2f}"

    lines = ["| target | rounds | (c) mount + load_checkpoint | (e) load_checkpoint, real folder | "
             "(f) benchfs mount + load_checkpoint, real folder through FUSE | (c)/(e) | (c)/(f) | (f)/(e) | "
             "CPU in load_checkpoint (c) / (e) / (f) | wall (c) / (e) / (f) |", "|" + "---|" * 10]
    for t in rounds[0]["targets"]:
        recs = {k: [rnd["targets"][t][k] for rnd in rounds] for k in "cef"}
        w = {k: med(recs[k], work) for k in "cef"}
        cpu = {k: med(recs[k], lambda r: r["cpu_load_checkpoint_s"])[0] for k in "cef"}
        wall = {k: med(recs[k], lambda r: r["wall_s"])[0] for k in "cef"}
        n = min(w[k][1] for k in "cef")
        lines.append(f"| {t} | {n} | {f(w['c'][0])} | {f(w['e'][0])} | {f(w['f'][0])} | {q(w['c'][0], w['e'][0])} | "
                     f"{q(w['c'][0], w['f'][0])} | {q(w['f'][0], w['e'][0])} | "
                     f"{f(cpu['c'])} / {f(cpu['e'])} / {f(cpu['f'])} | {f(wall['c'])} / {f(wall['e'])} / {f(wall['f'])} |")
    return "\n".join(lines)


def path_a_convert(cfg, rnd):
    out_root = os.path.join(cfg.run_dir, rnd, "dsu")
    shutil.rmtree(out_root, ignore_errors=True)
    os.makedirs(out_root)
    la = loadavg()
    cmd = ["python3", "/ds/deepspeed/checkpoint/ds_to_universal.py", "--input_folder",
           chroot_path(os.path.join(cfg.src, cfg.tag)), "--output_folder",
           chroot_path(os.path.join(out_root, cfg.tag + "_universal"))]
    cpu = {}
    rc, secs, t0, t1 = run_env(cmd, os.path.join(cfg.run_dir, rnd, "dsu.log"), cpu=cpu)
    du = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out_root) for f in fs)
    log(f"  ds_to_universal.py: rc={rc} {secs:.1f}s, CPU {cpu['cpu_s']:.1f}s, wrote {du / 2**20:.0f} MiB")
    return {"rc": rc, "seconds": secs, "cpu_s": cpu["cpu_s"], "out_root": out_root, "bytes_written": du,
            "loadavg_before": la}


def path_a_load(cfg, rnd, conv, target):
    stage, dp = target_params(target)
    if conv["rc"] != 0:
        return {"passed": False, "check": "ds_to_universal.py failed"}
    # the conversion ran just before; its time is added: end to end = convert + load
    t_fake_start = time.time() - conv["seconds"]
    rec = run_load(cfg, f"{rnd}/a_{target}", dp, stage, chroot_path(conv["out_root"]), True, t_fake_start)
    rec["convert_s"] = conv["seconds"]
    if "cpu_to_load_end_s" in rec:
        rec["cpu_to_load_end_s"] += conv["cpu_s"]  # end to end: the converter's CPU too
    return rec


def path_a_cannot(cfg, rnd, conv, target):
    """Universal load of ds_to_universal.py's output into another stage family: DeepSpeed stops
    (state_dict_factory.py check_ckpt_list: assert len(self.ckpt_list) > 0)."""
    stage, dp = target_params(target)
    rec = run_load(cfg, f"{rnd}/a_{target}", dp, stage, chroot_path(conv["out_root"]), True, time.time())
    tb = ""
    for k in range(dp):
        p = os.path.join(rec["dir"], f"r.json.rank{k}.err.json")
        if os.path.exists(p):
            tb += json.load(open(p))["traceback"]
    rec["cannot_load"] = not rec["passed"]
    rec["refused_by_check_ckpt_list"] = "check_ckpt_list" in tb and "AssertionError" in tb
    if rec["cannot_load"]:
        rec["check"] = ("DeepSpeed refuses: AssertionError in state_dict_factory.py check_ckpt_list "
                        "(assert len(self.ckpt_list) > 0)" if rec["refused_by_check_ckpt_list"] else rec["check"])
    return rec


def path_mount(cfg, rnd, target, kind):
    stage, dp = target_params(target)
    m = Mount(cfg.zeromount, cfg.src, cfg.mnt)
    t0 = time.time()
    try:
        mount_s = m.up()
        if kind == "b":
            rec = run_load(cfg, f"{rnd}/b_{target}", dp, stage, chroot_path(cfg.mnt), True, t0, mount=m)
        else:
            rec = run_load(cfg, f"{rnd}/c_{target}", dp, stage, chroot_path(os.path.join(cfg.mnt, "layouts", target)),
                           False, t0, mount=m)
        rec["mount_s"] = mount_s
        return rec
    finally:
        m.down()


def run_round(cfg, rnd, targets, cold, cannot_check):
    log(f"round {rnd}: targets {targets}{' (cold: drop_caches before each path)' if cold else ''}, load {loadavg()}")
    out = {"targets": {}, "loadavg_start": loadavg()}
    if cold:
        drop_caches()
    out["d"] = path_d(cfg, rnd)
    if cold:
        drop_caches()
    conv = path_a_convert(cfg, rnd)
    out["a_convert"] = conv
    for t in targets:
        stage, _ = target_params(t)
        r = {}
        if same_family(cfg.src_stage, stage):
            # cold: only ds_to_universal.py met cold shards; its output is then warm, as in real life
            r["a"] = path_a_load(cfg, rnd, conv, t)
        elif t in cannot_check:
            r["a"] = path_a_cannot(cfg, rnd, conv, t)
        else:
            r["a"] = {"cannot_load": True, "check": "not rerun: same family check as the verified targets"}
        for kind in ("b", "c"):
            if cold:
                drop_caches()
            r[kind] = path_mount(cfg, rnd, t, kind)
        if cfg.native_floor:
            if cold:
                drop_caches()
            r["e"] = path_e(cfg, rnd, t)
        out["targets"][t] = r
    shutil.rmtree(conv["out_root"], ignore_errors=True)
    out["loadavg_end"] = loadavg()
    return out


# ---------------------------------------------------------------- report

def fmt_s(rec):
    if rec is None:
        return "-"
    if rec.get("cannot_load"):
        return "cannot load" + ("" if "dir" in rec else "*")
    if not rec.get("passed"):
        return "FAILED"
    return f"{rec['wall_s']:.1f}"


def ratio(x, y, key="wall_s"):
    try:
        if x.get("passed") and y.get("passed"):
            return f"{x[key] / y[key]:.2f}"
    except AttributeError:
        pass
    return "-"


def mib(n):
    return "n/a" if n is None else f"{n / 2**20:.0f}"


def shard_bytes(rec):
    s = rec.get("stats")
    if not isinstance(s, dict):
        return f"n/a (daemon rchar {mib(rec.get('daemon_rchar'))} MiB)"
    per = " ".join(f"{k}:{mib(v)}" for k, v in sorted(s["per_opener"].items()))
    return f"{mib(s['bytes_from_shards'])} MiB, {s['requests']} req ({per})"


def has_e(rnd):
    return any("e" in r for r in rnd["targets"].values())


def table(rnd):
    d = rnd["d"]
    e_on = has_e(rnd)
    head = ("| target | (a) ds_to_universal + universal load | (b) mount + universal load | (c) mount + native layouts/T "
            "| (d) native, own stage/DP (floor) | ")
    if e_on:
        head += "(e) native, real checkpoint at T | (c)/(e) | CPU (c)/(e) | load_checkpoint (c)/(e) | "
    head += "(c)/(d) | (a)/(b) | (a)/(c) | CPU (c)/(d) | CPU (a)/(c) | bytes from shards (b) | (c) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for t, r in rnd["targets"].items():
        a, b, c = r["a"], r["b"], r["c"]
        row = f"| {t} | {fmt_s(a)} | {fmt_s(b)} | {fmt_s(c)} | {fmt_s(d)} | "
        if e_on:
            e = r.get("e") or {}
            row += (f"{fmt_s(e) if e else '-'} | {ratio(c, e)} | {ratio(c, e, 'cpu_to_load_end_s')} | "
                    f"{ratio(c, e, 'load_checkpoint_s')} | ")
        row += (f"{ratio(c, d)} | {ratio(a, b)} | {ratio(a, c)} | {ratio(c, d, 'cpu_to_load_end_s')} | "
                f"{ratio(a, c, 'cpu_to_load_end_s')} | {shard_bytes(b)} | {shard_bytes(c)} |")
        lines.append(row)
    return "\n".join(lines)


def checkpoint_work(rnd):
    """The same paths without what every path pays alike before the checkpoint is touched (process
    start, imports, model build, deepspeed.initialize): mount or conversion, then the last rank's
    load_checkpoint. This is what the mount changes; the issue's own first table counts this way."""
    conv = rnd["a_convert"]["seconds"]
    d = rnd["d"]

    def work(rec, before):
        if not rec or not rec.get("passed") or "load_checkpoint_s" not in rec:
            return None
        return before + rec["load_checkpoint_s"]

    def f(x):
        return "-" if x is None else f"{x:.2f}"

    def q(x, y):
        return "-" if x is None or y is None else f"{x / y:.1f}"

    def cpu_lc(rec):
        return rec["cpu_load_checkpoint_s"] if rec and rec.get("passed") and "cpu_load_checkpoint_s" in rec else None

    e_on = has_e(rnd)
    head = ("| target | (a) convert + load_checkpoint | (b) mount + load_checkpoint | (c) mount + load_checkpoint "
            "| (d) load_checkpoint | ")
    if e_on:
        head += "(e) load_checkpoint, real checkpoint at T | (c)/(e) | CPU in load_checkpoint (c)/(e) | "
    head += "(c)/(d) | (a)/(b) | (a)/(c) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    dw = work(d, 0.0)
    for t, r in rnd["targets"].items():
        a = work(r["a"], conv)
        b = work(r["b"], r["b"].get("before_launch_s", 0.0))
        c = work(r["c"], r["c"].get("before_launch_s", 0.0))
        row = f"| {t} | {'cannot load' if r['a'].get('cannot_load') else f(a)} | {f(b)} | {f(c)} | {f(dw)} | "
        if e_on:
            ew = work(r.get("e"), 0.0)
            row += f"{f(ew)} | {q(c, ew)} | {q(cpu_lc(r['c']), cpu_lc(r.get('e')))} | "
        row += f"{q(c, dw)} | {q(a, b)} | {q(a, c)} |"
        lines.append(row)
    return "\n".join(lines)


def breakdown(rnd):
    lines = ["| path | before launch (mount / convert) | launch -> python | imports | init (model, ds.initialize) "
             "| load_checkpoint (last rank) | torch.load in it (max rank) | bytes read per rank in load | "
             "wall | exit | CPU to load end, all ranks (imports; load_checkpoint) | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    recs = [("(d) floor", rnd["d"])]
    for t, r in rnd["targets"].items():
        for k in ("a", "b", "c", "e"):
            if "wall_s" in r.get(k, {}):
                recs.append((f"({k}) {t}", r[k]))
    for n, x in recs:
        rr = x["rank_rchar_during_load"]
        lines.append(f"| {n} | {x['before_launch_s']:.1f} | {x['to_python_start_s']:.1f} | {x['imports_s']:.1f} | "
                     f"{x['init_s']:.1f} | {x['load_checkpoint_s']:.1f} | {max(x['torch_load_s_per_rank']):.1f} | "
                     f"{mib(min(rr))}-{mib(max(rr))} MiB | {x['wall_s']:.1f} | {x['exit_s']:.1f} | "
                     f"{x['cpu_to_load_end_s']:.1f} ({x['cpu_imports_s']:.1f}; {x['cpu_load_checkpoint_s']:.1f}) | "
                     f"{x['loadavg_before'][0]:.2f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zeromount", default="/tmp/zm-baseline/zeromount")
    ap.add_argument("--work", default=f"{ORACLE}/out/resume", help="under /tmp/oracle (seen as /oracle)")
    ap.add_argument("--sizes", default="32768,1024,5000",
                    help="ORACLE_SIZES VOCAB,EMB,HID (default: 63.7M parameters, 729 MiB ZeRO-3 DP-2 checkpoint)")
    ap.add_argument("--source-stage", type=int, default=3)
    ap.add_argument("--source-dp", type=int, default=2)
    ap.add_argument("--targets", nargs="+", default=ALL_TARGETS)
    ap.add_argument("--quick", action="store_true", help="smoke test: one target (zero2-dp2-fp32), no warm-up round")
    ap.add_argument("--warmup-targets", nargs="*", default=["zero3-dp2-fp32"],
                    help="round 1, not reported: all four paths for these targets, to bring the shards and the "
                    "python/torch/DeepSpeed files into the page cache (default zero3-dp2-fp32; --warmup-targets "
                    "with no name: none; --full-warmup: every target)")
    ap.add_argument("--full-warmup", action="store_true", help="warm-up round over every target (doubles the time)")
    ap.add_argument("--repeat", type=int, default=1, help="measured warm rounds after the warm-up (default 1)")
    ap.add_argument("--cold", action="store_true", help="then one cold round (drop_caches before each path; about "
                    "+4 min, and it empties the page cache of everyone on the machine)")
    ap.add_argument("--cold-targets", nargs="+", default=["zero3-dp2-fp32", "zero2-dp2-fp32"])
    ap.add_argument("--cannot-check", nargs="+", default=["zero1-dp2-fp32", "zero2-dp2-fp32"],
                    help="targets outside the source's stage family for which (a) is actually run "
                    "(in the first round only) to show DeepSpeed refusing; the others are reported from that")
    ap.add_argument("--native-floor", action="store_true",
                    help="(e) too: for each target, a native load of a checkpoint really saved by DeepSpeed at that "
                    "layout (made once by resave.py --via set-state, cached in WORK/native/<target>/, not timed)")
    ap.add_argument("--floor", action="store_true",
                    help="only (c), (e) and (f) (the real checkpoint through benchfs): a warm-up round, then "
                         "--repeat alternating rounds (default 3), medians")
    ap.add_argument("--out", default=None, help="JSON of everything (default WORK/resume-<time>.json)")
    ap.add_argument("--report", metavar="JSON", help="only print the tables of an earlier run's JSON")
    cfg = ap.parse_args()
    if cfg.report:
        return print_report(json.load(open(cfg.report)))
    if os.geteuid() != 0:
        raise SystemExit("run as root (chroot, FUSE mounts, drop_caches)")

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    # SIGTERM, and SIGINT even when started in the background (where the shell ignores it), run the
    # finally blocks: the ranks' process group is killed and the mount is unmounted
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    if cfg.quick:
        cfg.targets, cfg.warmup_targets, cfg.repeat = ["zero2-dp2-fp32"], [], 1
    if cfg.floor:
        cfg.native_floor = True
        cfg.repeat = cfg.repeat if "--repeat" in sys.argv else 3
        cfg.benchfs = os.path.join(ORACLE, "out", "benchfs")  # built each run: never an older one
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True,
                               check=True).stdout.split()
        subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "benchfs.cpp"), *flags, "-o", cfg.benchfs], check=True)
    if cfg.full_warmup:
        cfg.warmup_targets = list(cfg.targets)
    for t in cfg.targets:
        target_params(t)
    cfg.work = os.path.abspath(cfg.work)
    name = f"z{cfg.source_stage}_dp{cfg.source_dp}_{cfg.sizes.replace(',', 'x')}"
    cfg.src = os.path.join(cfg.work, "ckpt", name)
    cfg.meta = os.path.join(cfg.work, "meta", name)
    cfg.reference = os.path.join(cfg.meta, "live_state.pt")
    cfg.src_stage, cfg.src_dp = cfg.source_stage, cfg.source_dp
    cfg.mnt = os.path.join(ROOTFS, "zm-mnt", f"resume_{name}")
    cfg.run_dir = os.path.join(cfg.work, "runs", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(cfg.run_dir)
    cfg.wrapper = os.path.join(cfg.work, "timed_load.py")
    with open(cfg.wrapper, "w") as f:
        f.write(WRAPPER)
    t_begin = time.time()
    report = {"argv": sys.argv, "sizes": cfg.sizes, "source": cfg.src, "zeromount": cfg.zeromount,
              "uptime_start": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "nproc_host": os.cpu_count(), "rounds": {}}

    if not os.path.exists(cfg.reference):
        log(f"training the source checkpoint {cfg.src} (ORACLE_SIZES={cfg.sizes})")
        os.makedirs(cfg.src, exist_ok=True)
        os.makedirs(cfg.meta, exist_ok=True)
        rc, secs, _, _ = run_env(["python3", "harness/launch.py", "--nproc", str(cfg.src_dp), "--timeout", "1200",
                                  "harness/oracle_train.py", "--stage", str(cfg.src_stage),
                                  "--save-dir", chroot_path(cfg.src), "--meta-dir", chroot_path(cfg.meta)],
                                 os.path.join(cfg.work, f"train_{name}.log"), f"ORACLE_SIZES={cfg.sizes}")
        if rc != 0:
            raise SystemExit(f"training failed (rc {rc}), see {cfg.work}/train_{name}.log")
        report["train_s"] = secs
    cfg.tag = open(os.path.join(cfg.src, "latest")).read().strip()
    cfg.name = name
    default_name = f"z3_dp2_{ap.get_default('sizes').replace(',', 'x')}"
    cfg.native_root = os.path.join(cfg.work, "native") if name == default_name else os.path.join(cfg.work, "native", name)
    cfg.native = {}
    if cfg.native_floor:
        t_native = time.time()
        for t in dict.fromkeys(list(cfg.targets) + list(cfg.warmup_targets)):
            cfg.native[t] = make_native(cfg, t)
        report["native_floor"] = {"root": cfg.native_root, "seconds": time.time() - t_native, "targets": cfg.native}
    src_bytes = sum(os.path.getsize(os.path.join(cfg.src, cfg.tag, f)) for f in os.listdir(os.path.join(cfg.src, cfg.tag)))
    report["source_bytes"] = src_bytes
    log(f"source {cfg.src}/{cfg.tag}: ZeRO-{cfg.src_stage} DP {cfg.src_dp}, {src_bytes / 2**20:.0f} MiB; "
        f"run dir {cfg.run_dir}")

    out_json = report["json"] = cfg.out or os.path.join(cfg.work, f"resume-{os.path.basename(cfg.run_dir)}.json")
    try:
        if cfg.floor:
            report["floor_warmup"] = run_floor_round(cfg, "floor-warmup", cfg.targets, False)
            report["floor_rounds"] = [run_floor_round(cfg, f"floor{i + 1}", cfg.targets, i % 2 == 1)
                                      for i in range(cfg.repeat)]
            return 0
        if cfg.warmup_targets:
            report["rounds"]["warmup"] = run_round(cfg, "warmup", cfg.warmup_targets, False, [])
        for i in range(cfg.repeat):
            rn = "warm" if cfg.repeat == 1 else f"warm{i + 1}"
            report["rounds"][rn] = run_round(cfg, rn, cfg.targets, False, cfg.cannot_check if i == 0 else [])
        if cfg.cold:
            report["rounds"]["cold"] = run_round(cfg, "cold", [t for t in cfg.cold_targets if t in cfg.targets]
                                                 or cfg.targets[:1], True, [])
    finally:
        if os.path.ismount(cfg.mnt):
            subprocess.run(["fusermount3", "-u", cfg.mnt])
        report["total_s"] = time.time() - t_begin
        report["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        with open(out_json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        if cfg.floor:
            print_floor(report)
    return print_report(report)


def print_floor(report):
    rounds = report.get("floor_rounds") or []
    print(f"\nuptime at start: {report['uptime_start']}\nuptime at end:   {report['uptime_end']}")
    if not rounds:
        return
    print(f"\n### Against the FUSE floor: medians of {len(rounds)} rounds, alternating order (seconds)\n")
    print(floor_table(rounds))
    for i, rnd in enumerate(rounds):
        for t, r in rnd["targets"].items():
            for k, rec in r.items():
                if not rec.get("passed"):
                    print(f"FAILED: round {i + 1} {t} ({k}): {rec.get('check', '')[:300]}")


def print_report(report):
    if "floor_rounds" in report:
        print_floor(report)
        return 0
    print()
    print(f"uptime at start: {report['uptime_start']}")
    print(f"uptime at end:   {report['uptime_end']}")
    print(f"total {report['total_s']:.0f} s; JSON: {report.get('json')}")
    first = report["rounds"].get("warm") or report["rounds"]["warm1"]
    nf = report.get("native_floor")
    if nf:
        print(f"\n(e) real native checkpoints (resave.py, not timed; {nf['seconds']:.0f} s) in {nf['root']}:")
        for t, i in nf["targets"].items():
            if i["ok"]:
                print(f"  {t}: via {i.get('method')}, {'cached' if i['cached'] else 'made in %.0f s' % i['made_s']}, "
                      f"{mib(i['bytes'])} MiB, "
                      f"zero_to_fp32 == live state: {i.get('zero_to_fp32_equal_to_live_state')}")
            else:
                print(f"  {t}: NOT MADE: {i.get('error', '')[:300]}")
    for rn, rnd in report["rounds"].items():
        print(f"\n### {rn}: seconds from the first step to the last rank's load_checkpoint return "
              f"(load avg {rnd['loadavg_start'][0]:.2f} -> {rnd['loadavg_end'][0]:.2f})\n")
        print(f"ds_to_universal.py: {rnd['a_convert']['seconds']:.1f} s, CPU {rnd['a_convert']['cpu_s']:.1f} s "
              f"(rc {rnd['a_convert']['rc']}), "
              f"wrote {mib(rnd['a_convert']['bytes_written'])} MiB\n")
        print(table(rnd))
        print("\nCheckpoint work only (mount or conversion, then the last rank's load_checkpoint):\n")
        print(checkpoint_work(rnd))
        print()
        print(breakdown(rnd))
    for t, r in first["targets"].items():
        a = r["a"]
        if "dir" in a and not a.get("passed"):
            print(f"\n(a) {t}: {a['check'][:300]}")
    print("\n(a) 'cannot load*': not rerun, the same stage-family check as the targets shown above.")
    fails = [(rn, t, k, r[k]["check"]) for rn, rnd in report["rounds"].items() for t, r in rnd["targets"].items()
             for k in ("b", "c", "e") if k in r and not r[k].get("passed")]
    fails += [(rn, "-", "d", rnd["d"]["check"]) for rn, rnd in report["rounds"].items() if not rnd["d"].get("passed")]
    for f in fails:
        print("FAILED:", *f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
