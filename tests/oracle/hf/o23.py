#!/usr/bin/env python3
"""Issue 23's oracle driver (host side; by hand, never in CI). Runs the real Hugging Face Trainer and
Accelerate (the HF chroot of ../../../../shared/oracle/hf, README there) against zeromount mounts of
the Trainer fixtures, and against DeepSpeed's own output on the real files, then compares.

  o23.py setup          copy fixtures and these scripts under $HF_WORK/o23, make the extra sources
                        (llama_z3_bf16: ZeRO-3 bf16 2 ranks; llama_z2_dp1: ZeRO-2 fp32 1 rank) and the
                        converter references (ds_to_universal.py on copies of the real checkpoint-2)
  o23.py mount          mount every source output_dir at $ROOTFS/zm-mnt/o23-<src> (and -s: max_shard_size=200KB)
  o23.py resumes [PAT]  run the Trainer resume jobs (cells 1, 2), skipping those with a result
  o23.py compare        compare each resume with its reference (in the chroot) -> $HF_WORK/o23/res/cells12.json
  o23.py weights        cell 3 (from_pretrained)          -> $HF_WORK/o23/res/cell3.json
  o23.py accel          cell 4: an Accelerate run saves checkpoints/checkpoint_0, mounted at zm-mnt/o23-accel;
                        load_state from faked layouts, the real folder, ds_to_universal's output
                        -> $HF_WORK/o23/res/cell4.json
  o23.py clients        cell 5 (DeepSpeed / HF on the real files) -> $HF_WORK/o23/res/cell5.json
  o23.py gathers        every ZeRO-3 run's gathered module weights against its fp32 masters -> gathers.json
                        (repeat_gather.py K: the GPT-2 ZeRO-3 dp2 resumes K more times each)
  o23.py umount
Environment: HF_WORK (default /tmp/ds-hf/work), ORACLE_ROOTFS (/tmp/ds-hf/rootfs), ORACLE_HF (/tmp/oracle/hf),
ZEROMOUNT (build/zeromount of this tree), FIXTURES (../shared/fixtures/hf beside this tree), JOBS (parallel jobs, 2).
"""
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import concurrent.futures as cf

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
HF_WORK = os.environ.get("HF_WORK", "/tmp/ds-hf/work")
ROOTFS = os.environ.get("ORACLE_ROOTFS", "/tmp/ds-hf/rootfs")
ORACLE_HF = os.environ.get("ORACLE_HF", "/tmp/oracle/hf")
ZEROMOUNT = os.environ.get("ZEROMOUNT", os.path.join(TREE, "build", "zeromount"))
FIXTURES = os.environ.get("FIXTURES", os.path.join(os.path.dirname(TREE), "shared", "fixtures", "hf"))
JOBS = int(os.environ.get("JOBS", "2"))
O = os.path.join(HF_WORK, "o23")          # /w/o23 inside
MNT = os.path.join(ROOTFS, "zm-mnt")      # /zm-mnt inside
PYPATH = "PYTHONPATH=/ds:/hf:/hf/site:/w/o23/py"
ENV = f"{PYPATH} PYTHONHASHSEED=0 TRANSFORMERS_VERBOSITY=info"

# source -> model, stage, dtype, ranks (the run that saved checkpoint-2/ and checkpoint-4/)
SOURCES = {
    "llama_z3": ("llama", 3, "fp32", 2),
    "gpt2_z2": ("gpt2", 2, "fp32", 2),
    "llama_z2_bf16": ("llama", 2, "bf16", 2),
    "llama_z3_bf16": ("llama", 3, "bf16", 2),   # made by setup
    "llama_z2_dp1": ("llama", 2, "fp32", 1),    # made by setup: a smaller source DP, resumed at 2 ranks
    "gpt2_z3": ("gpt2", 3, "fp32", 2),          # made by setup: tied lm_head/wte under ZeRO-3
}
MADE = ("llama_z3_bf16", "llama_z2_dp1", "gpt2_z3")
# targets (stage, ranks) per source, in the source's precision
TARGETS = {
    "llama_z3": [(3, 2), (2, 2), (3, 1), (2, 1)],
    "gpt2_z2": [(2, 2), (3, 2), (2, 1), (3, 1)],
    "llama_z2_bf16": [(2, 2), (3, 2), (2, 1), (3, 1)],
    "llama_z3_bf16": [(3, 2), (2, 2), (3, 1), (2, 1)],
    "llama_z2_dp1": [(2, 1), (3, 1), (2, 2), (3, 2)],
    "gpt2_z3": [(3, 2), (2, 2), (3, 1), (2, 1)],
}


def layout(stage, ranks, dtype):
    return f"zero{stage}-dp{ranks}-{dtype}"


def own(src):
    m, s, d, n = SOURCES[src]
    return (s, n)


def jobs():
    """name -> (ranks, model, stage, dtype, resume path in the chroot, load_universal)"""
    out = {}
    for src, targets in TARGETS.items():
        model, _, dtype, _ = SOURCES[src]
        for stage, n in targets:
            t = f"z{stage}dp{n}"
            out[f"{src}__U__{t}"] = (n, model, stage, dtype, f"/zm-mnt/o23-{src}/checkpoint-2", True)
            out[f"{src}__N__{t}"] = (n, model, stage, dtype,
                                     f"/zm-mnt/o23-{src}/checkpoint-2/layouts/{layout(stage, n, dtype)}", False)
            if (stage, n) == own(src):
                out[f"{src}__RN__{t}"] = (n, model, stage, dtype, f"/w/o23/fix/{src}/run/checkpoint-2", False)
            out[f"{src}__RU__{t}"] = (n, model, stage, dtype, f"/w/o23/ref/{src}/checkpoint-2", True)
            if stage == 3 and src == "gpt2_z2":   # cell 5: fails in DeepSpeed too (KeyError optimizer_state_dict)
                out[f"{src}__RUL__{t}"] = (n, model, stage, dtype, f"/w/o23/ref_layout/{src}/checkpoint-2", True)
                out[f"{src}__RUF__{t}"] = (n, model, stage, dtype, f"/w/o23/ref_fix/{src}/checkpoint-2", True)
    # cell 5: DeepSpeed itself on the real folder, natively at another layout, and load_universal without a
    # converted folder
    for src, (stage, n) in (("gpt2_z2", (2, 1)), ("gpt2_z2", (3, 2)), ("llama_z3", (3, 1)), ("llama_z3", (2, 2))):
        model, _, dtype, _ = SOURCES[src]
        out[f"{src}__RX__z{stage}dp{n}"] = (n, model, stage, dtype, f"/w/o23/fix/{src}/run/checkpoint-2", False)
    out["gpt2_z2__RXU__z2dp2"] = (2, "gpt2", 2, "fp32", "/w/o23/fix/gpt2_z2/run/checkpoint-2", True)
    return out


def chroot(cmd, log=None, env=ENV):
    e = dict(os.environ, HF_WORK=HF_WORK, ORACLE_ROOTFS=ROOTFS, HF_EXTRA_ENV=env)
    with open(log, "w") if log else open(os.devnull, "w") as f:
        r = subprocess.run([os.path.join(ORACLE_HF, "run_in_env.sh"), "bash", "-c", cmd], env=e,
                           stdout=f if log else None, stderr=subprocess.STDOUT if log else None)
    return r.returncode


def train_cmd(n, model, stage, dtype, out, result, extra="", script="train.py"):
    half = " --dtype bf16 --gloo-half-shim" if dtype == "bf16" else ""
    return (f"python3 launch.py --nproc {n} --timeout 3000 {script} --model {model} --stage {stage}{half} "
            f"--out {out} --result {result} {extra}")


def setup():
    for d in ("py", "runs", "res", "logs", "ref"):
        os.makedirs(os.path.join(O, d), exist_ok=True)
    for f in os.listdir(HERE):
        if f.endswith(".py"):
            shutil.copy2(os.path.join(HERE, f), os.path.join(O, "py", f))
    if not os.path.isdir(os.path.join(O, "fix")):
        shutil.copytree(FIXTURES, os.path.join(O, "fix"), symlinks=True)
    # the extra sources: the same train.py, uninterrupted, 4 steps, saves at 2 and 4
    for src in MADE:
        model, stage, dtype, n = SOURCES[src]
        run = os.path.join(O, "fix", src)
        if os.path.exists(os.path.join(run, "meta", "final_state.pt")):
            continue
        shutil.rmtree(run, ignore_errors=True)
        cmd = train_cmd(n, model, stage, dtype, f"/w/o23/fix/{src}/run", f"/w/o23/fix/{src}/meta/{src}_train.json",
                        "--max-steps 4 --save-steps 2")
        cmd += f" && mv /w/o23/fix/{src}/run/*.pt /w/o23/fix/{src}/meta/"
        rc = chroot(f"mkdir -p /w/o23/fix/{src}/meta && {cmd}", os.path.join(O, "logs", f"train_{src}.log"))
        print("train", src, "rc", rc, flush=True)
    # a Trainer run with a tokenizer: llama_z3 with the tokenizer files a Trainer writes beside its checkpoints
    tok = os.path.join(O, "fix", "llama_z3_tok", "run")
    if not os.path.isdir(tok):
        shutil.copytree(os.path.join(O, "fix", "llama_z3", "run"), tok, symlinks=True)
        rc = chroot("python3 /w/o23/py/tok_setup.py /w/o23/fix/llama_z3_tok/run/checkpoint-2 "
                    "/w/o23/fix/llama_z3_tok/run/checkpoint-4", os.path.join(O, "logs", "tok_setup.log"))
        print("tokenizer files", rc, flush=True)
    # DeepSpeed's own universal checkpoint of each real checkpoint-2 (the reference for new layouts)
    for src in SOURCES:
        ref = os.path.join(O, "ref", src, "checkpoint-2")
        if os.path.exists(os.path.join(ref, "latest_universal")):
            continue
        shutil.rmtree(ref, ignore_errors=True)
        shutil.copytree(os.path.join(O, "fix", src, "run", "checkpoint-2"), ref, symlinks=True)
        inj = " --inject_missing_state" if SOURCES[src][1] < 3 else ""
        rc = chroot(f"cd /w/o23/ref/{src}/checkpoint-2 && python3 /ds/deepspeed/checkpoint/ds_to_universal.py "
                    f"--input_folder global_step2 --output_folder global_step2_universal{inj}",
                    os.path.join(O, "logs", f"ds_to_universal_{src}.log"))
        print("ds_to_universal", src, "rc", rc, flush=True)
    # DeepSpeed's converter on the mount's native fake of a ZeRO-2 source at ZeRO-3 (its ZeRO-3 output format):
    # a second, DeepSpeed-made universal checkpoint for ZeRO-3 targets of a ZeRO-2 source (needs the mount)
    for src in ("gpt2_z2",):
        lay = os.path.join(O, "ref_layout", src, "checkpoint-2")
        if os.path.exists(os.path.join(lay, "latest_universal")) or not os.path.ismount(os.path.join(MNT, f"o23-{src}")):
            continue
        shutil.rmtree(lay, ignore_errors=True)
        shutil.copytree(os.path.join(O, "fix", src, "run", "checkpoint-2"), lay, symlinks=True)
        rc = chroot(f"cd /w/o23/ref_layout/{src}/checkpoint-2 && python3 /ds/deepspeed/checkpoint/ds_to_universal.py "
                    f"--input_folder /zm-mnt/o23-{src}/checkpoint-2/layouts/zero3-dp2-fp32/global_step2 "
                    "--output_folder global_step2_universal", os.path.join(O, "logs", f"ds_to_universal_layout_{src}.log"))
        print("ds_to_universal of layouts/zero3-dp2-fp32", src, "rc", rc, flush=True)
    # ds_to_universal.py's output of a ZeRO-1/2 checkpoint holds only mp_rank_00_model_states.pt, which a
    # ZeRO-3 engine does not glob (AssertionError in check_ckpt_list): the same output with that file also
    # named zero_pp_rank_{0,1}_mp_rank_00_model_states.pt, as the mount's <T>_universal/ names it
    for src in SOURCES:
        if SOURCES[src][1] == 3:
            continue
        fixd = os.path.join(O, "ref_fix", src, "checkpoint-2")
        if os.path.isdir(fixd):
            continue
        shutil.copytree(os.path.join(O, "ref", src, "checkpoint-2"), fixd, symlinks=True)
        u = os.path.join(fixd, "global_step2_universal")
        for r in range(2):
            shutil.copy2(os.path.join(u, "mp_rank_00_model_states.pt"),
                         os.path.join(u, f"zero_pp_rank_{r}_mp_rank_00_model_states.pt"))


def mount():
    for src in SOURCES:
        for suffix, opts in (("", []), ("-s", ["-o", "max_shard_size=200KB"])):
            m = os.path.join(MNT, f"o23-{src}{suffix}")
            if os.path.ismount(m):
                continue
            os.makedirs(m, exist_ok=True)
            subprocess.run([ZEROMOUNT, *opts, "--log-file", os.path.join(O, "logs", f"zm-{src}{suffix}.log"),
                            os.path.join(O, "fix", src, "run"), m], check=True)
            print("mounted", m)


    m = os.path.join(MNT, "o23-llama_z3-tok")
    if not os.path.ismount(m):
        os.makedirs(m, exist_ok=True)
        subprocess.run([ZEROMOUNT, "--log-file", os.path.join(O, "logs", "zm-llama_z3-tok.log"),
                        os.path.join(O, "fix", "llama_z3_tok", "run"), m], check=True)
        print("mounted", m)


def umount():
    for src in SOURCES:
        for suffix in ("", "-s", "-tok"):
            m = os.path.join(MNT, f"o23-{src}{suffix}")
            if os.path.ismount(m):
                subprocess.run(["fusermount3", "-u", m])
    for m in ("o23-accel", "o23-accel-real"):
        if os.path.ismount(os.path.join(MNT, m)):
            subprocess.run(["fusermount3", "-u", os.path.join(MNT, m)])


def run_job(name, spec, force=False):
    n, model, stage, dtype, path, uni = spec
    res = os.path.join(O, "res", f"{name}.json")
    if os.path.exists(res) and not force:
        return name, "skipped"
    cmd = (f"rm -rf /w/o23/runs/{name} /w/o23/res/{name}.json /w/o23/res/{name}.rank*.json; "
           + train_cmd(n, model, stage, dtype, f"/w/o23/runs/{name}", f"/w/o23/res/{name}.json",
                       f"--max-steps 4 --save-steps 100 --resume {path}" + (" --load-universal" if uni else ""),
                       "/w/o23/py/train_probe.py"))
    rc = chroot(cmd, os.path.join(O, "logs", f"{name}.log"))
    if not os.path.exists(res):   # a crash before train.py wrote its result
        with open(res, "w") as f:
            json.dump({"error": f"rc={rc}, no result; see logs/{name}.log", "rc": rc}, f)
    return name, f"rc={rc}"


def resumes(pats):
    todo = {k: v for k, v in jobs().items() if not pats or any(fnmatch.fnmatch(k, p) for p in pats)}
    with cf.ThreadPoolExecutor(JOBS) as ex:
        for fut in cf.as_completed([ex.submit(run_job, k, v) for k, v in todo.items()]):
            print(*fut.result(), flush=True)


ACC = {  # cell 4: name -> (ranks, stage, load_state path in the chroot, load_universal)
    "acc_z2__RN__z2dp2": (2, 2, "/w/o23/accel/z2/checkpoints/checkpoint_0", False),
    "acc_z2__N__z2dp2": (2, 2, "/zm-mnt/o23-accel/checkpoints/checkpoint_0/layouts/zero2-dp2-fp32", False),
    "acc_z2__N__z2dp1": (1, 2, "/zm-mnt/o23-accel/checkpoints/checkpoint_0/layouts/zero2-dp1-fp32", False),
    "acc_z2__N__z3dp1": (1, 3, "/zm-mnt/o23-accel/checkpoints/checkpoint_0/layouts/zero3-dp1-fp32", False),
    "acc_z2__N__z3dp2": (2, 3, "/zm-mnt/o23-accel/checkpoints/checkpoint_0/layouts/zero3-dp2-fp32", False),
    "acc_z2__RU__z2dp1": (1, 2, "/w/o23/accel/ref_z2/checkpoint_0", True),
    "acc_z2__RU__z3dp1": (1, 3, "/w/o23/accel/ref_z2/checkpoint_0", True),
    "acc_z2__RU__z3dp2": (2, 3, "/w/o23/accel/ref_z2/checkpoint_0", True),
    # the universal view cannot be reached: load_state passes the tag "pytorch_model"
    "acc_z2__U__z2dp1": (1, 2, "/zm-mnt/o23-accel/checkpoints/checkpoint_0", True),
    # DeepSpeed itself on the real folder at a new DP size, natively (what the layouts are for)
    "acc_z2__RN__z2dp1": (1, 2, "/w/o23/accel/z2/checkpoints/checkpoint_0", False),
    "acc_z2__RN__z3dp1": (1, 3, "/w/o23/accel/z2/checkpoints/checkpoint_0", False),
}


def accel():
    acc = os.path.join(O, "accel")
    os.makedirs(acc, exist_ok=True)
    if not os.path.exists(os.path.join(acc, "z2", "final_state.pt")):
        rc = chroot("rm -rf /w/o23/accel/z2 && python3 launch.py --nproc 2 --timeout 3000 /w/o23/py/accel_train.py "
                    "--stage 2 --out /w/o23/accel/z2 --result /w/o23/res/acc_z2__save.json",
                    os.path.join(O, "logs", "acc_z2__save.log"))
        print("accelerate save run rc", rc, flush=True)
    ref = os.path.join(acc, "ref_z2", "checkpoint_0")
    if not os.path.isdir(os.path.join(ref, "pytorch_model", "zero")):
        shutil.rmtree(os.path.dirname(ref), ignore_errors=True)
        shutil.copytree(os.path.join(acc, "z2", "checkpoints", "checkpoint_0"), ref, symlinks=True,
                        ignore=lambda d, names: ["pytorch_model"] if d.endswith("checkpoint_0") else [])
        rc = chroot("python3 /ds/deepspeed/checkpoint/ds_to_universal.py --inject_missing_state --input_folder "
                    "/w/o23/accel/z2/checkpoints/checkpoint_0/pytorch_model --output_folder "
                    "/w/o23/accel/ref_z2/checkpoint_0/pytorch_model", os.path.join(O, "logs", "acc_ds_to_universal.log"))
        print("accelerate reference (ds_to_universal) rc", rc, flush=True)
    m = os.path.join(MNT, "o23-accel")
    if not os.path.ismount(m):
        os.makedirs(m, exist_ok=True)
        subprocess.run([ZEROMOUNT, "--log-file", os.path.join(O, "logs", "zm-accel.log"), os.path.join(acc, "z2"), m],
                       check=True)

    def one(name):
        n, stage, path, uni = ACC[name]
        if os.path.exists(os.path.join(O, "res", f"{name}.json")):
            return name, "skipped"
        rc = chroot(f"rm -rf /w/o23/runs/{name}; mkdir -p /w/o23/runs/{name}; python3 launch.py --nproc {n} --timeout 3000 "
                    f"/w/o23/py/accel_train.py --stage {stage} --out /w/o23/runs/{name} --resume {path} "
                    f"--result /w/o23/res/{name}.json" + (" --load-universal" if uni else ""),
                    os.path.join(O, "logs", f"{name}.log"))
        return name, f"rc={rc}"
    with cf.ThreadPoolExecutor(JOBS) as ex:
        for fut in cf.as_completed([ex.submit(one, k) for k in ACC]):
            print(*fut.result(), flush=True)
    with open(os.path.join(O, "py", "accel_jobs.json"), "w") as f:
        json.dump(ACC, f)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    os.makedirs(os.path.join(O, "py"), exist_ok=True)
    for f in os.listdir(HERE):   # the chroot runs these from /w/o23/py
        if f.endswith(".py"):
            shutil.copy2(os.path.join(HERE, f), os.path.join(O, "py", f))
    if cmd == "setup":
        setup()
    elif cmd == "mount":
        mount()
    elif cmd == "umount":
        umount()
    elif cmd == "resumes":
        resumes(args)
    elif cmd == "accel-runs":
        accel()
    elif cmd == "jobs":
        print(json.dumps(jobs(), indent=1))
    elif cmd in ("compare", "weights", "accel", "clients", "gathers"):
        if cmd == "accel":
            accel()
        script = {"compare": "compare.py", "weights": "weights_check.py", "accel": "accel_compare.py",
                  "clients": "clients.py", "gathers": "gathers.py"}[cmd]
        if cmd == "compare":
            with open(os.path.join(O, "py", "jobs.json"), "w") as f:
                json.dump({"jobs": jobs(), "sources": SOURCES, "targets": TARGETS}, f)
        sys.exit(chroot(f"python3 /w/o23/py/{script} {' '.join(args)}", None, f"{PYPATH} PYTHONHASHSEED=0"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
