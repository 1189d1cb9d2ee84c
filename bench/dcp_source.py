#!/usr/bin/python3
"""A DCP source of about 1 GB mounted (issue 41): the mount's time to answer and its first read of
<T>_fp32/model.safetensors, against the offline path, which reads every item of the DCP folder,
assembles each tensor whole in RAM and writes a safetensors file (what dcp_to_torch_save plus a
safetensors write does; Debian's torch 1.13 has no dcp_to_torch_save, so the assembling is the
tests' independent DCP reader, tests/py/dcp_reader.py, with numpy writing the safetensors file).

The DCP folder is a Trainer/Accelerate `checkpoint-1/` (pytorch_model_fsdp_0/ + optimizer_0/ at 2
ranks) written by `zeromount export --layout fsdp-dp2` of a ZeRO-2 checkpoint that
tests/tools/gen_ckpt.py makes: the same format torch writes (docs/oracle-results.md has torch's
own loads of it).

    /usr/bin/python3 bench/dcp_source.py [--zeromount build/zeromount] [--work /tmp/zm-dcp-source]
"""
import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def folder_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def make_source(zeromount, work):
    ds, run = f"{work}/ds", f"{work}/run"
    if not os.path.exists(f"{ds}/latest"):
        shutil.rmtree(ds, ignore_errors=True)
        subprocess.run(["/usr/bin/python3", f"{ROOT}/tests/tools/gen_ckpt.py", ds, "--stage", "2", "--dp", "2",
                        "--sizes", "4096x4096,4096x4096,4096x4096,4096x4096,4096,30000x1024,4096"], check=True,
                       stdout=subprocess.DEVNULL)
    if not os.path.exists(f"{run}/checkpoint-1/optimizer_0/.metadata"):
        shutil.rmtree(run, ignore_errors=True)
        os.makedirs(run)
        subprocess.run([zeromount, "export", ds, f"{run}/checkpoint-1", "--layout", "fsdp-dp2"], check=True,
                       stdout=subprocess.DEVNULL)
        for f in os.listdir(f"{run}/checkpoint-1"):  # the two DCP folders only, as a Trainer's checkpoint
            if f not in ("pytorch_model_fsdp_0", "optimizer_0"):
                p = f"{run}/checkpoint-1/{f}"
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    return run


def mounted(zeromount, run):
    mnt = tempfile.mkdtemp(prefix="zm-dcp-src-")
    t0 = time.perf_counter()
    subprocess.run([zeromount, run, mnt], check=True, env={**os.environ, "ZEROMOUNT_NO_INDEX_CACHE": "1"},
                   stderr=subprocess.DEVNULL)
    os.listdir(mnt)
    t_mount = time.perf_counter() - t0
    pid = int(subprocess.run(["pgrep", "-n", "-f", f"{run} {mnt}"], capture_output=True, text=True,
                             check=True).stdout.split()[0])
    f = f"{mnt}/checkpoint-1_fp32/model.safetensors"
    t0 = time.perf_counter()
    n = 0
    with open(f, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += len(chunk)
    t_read = time.perf_counter() - t0
    hwm = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    subprocess.run(["fusermount3", "-u", mnt], check=False)
    os.rmdir(mnt)
    return t_mount, t_read, n, hwm


def offline(run, out):
    """The offline path in a child process, so that its peak RSS is its own."""
    code = f"""
import sys, json, struct, time, resource
sys.path.insert(0, {os.path.join(ROOT, 'tests', 'py')!r})
import dcp_reader
t0 = time.perf_counter()
_, sd = dcp_reader.load({run + '/checkpoint-1/pytorch_model_fsdp_0'!r})
tensors = {{k[len('model.'):]: v.numpy() for k, v in sd.items() if k.startswith('model.')}}
header, offset = {{}}, 0
for k, a in tensors.items():
    header[k] = {{'dtype': 'F32', 'shape': list(a.shape), 'data_offsets': [offset, offset + a.nbytes]}}
    offset += a.nbytes
h = json.dumps(header).encode()
with open({out!r}, 'wb') as f:
    f.write(struct.pack('<Q', len(h))); f.write(h)
    for a in tensors.values(): f.write(a.tobytes())
print(json.dumps({{'seconds': time.perf_counter() - t0,
                  'peak_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""
    r = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zeromount", default=os.path.join(ROOT, "build", "zeromount"))
    ap.add_argument("--work", default="/tmp/zm-dcp-source")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    run = make_source(a.zeromount, a.work)
    size = folder_bytes(run)
    subprocess.run(["cat"] + [os.path.join(r, f) for r, _, fs in os.walk(run) for f in fs], stdout=subprocess.DEVNULL)
    print(f"DCP source: {size / 1e9:.2f} GB ({run}/checkpoint-1, 2 ranks); page cache warm\n")
    print("| path | time to first byte (s) | model.safetensors written/read (s) | total (s) | peak RSS (MiB) |")
    print("|---|---|---|---|---|")
    t_mount, t_read, n, hwm = mounted(a.zeromount, run)
    print(f"| zeromount (mount, then read {n / 1e9:.2f} GB) | {t_mount:.2f} | {t_read:.2f} | {t_mount + t_read:.2f} "
          f"| {hwm:.0f} (daemon) |", flush=True)
    res = offline(run, f"{a.work}/offline.safetensors")
    print(f"| offline (assemble in RAM, write safetensors) | {res['seconds']:.2f} | (included) | {res['seconds']:.2f} "
          f"| {res['peak_mib']:.0f} |")
    os.remove(f"{a.work}/offline.safetensors")


if __name__ == "__main__":
    main()
