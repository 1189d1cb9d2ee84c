"""One rank of bench/dcp.py, inside the oracle chroot (torch 2.x): FSDP2 + AdamW over the oracle's
TinyModel (ORACLE_SIZES), then alternating timed DCP loads of the floor (a real FSDP2 DCP save of
the same state, made here by torch from the mount's state) and of MNT/layouts/fsdp-dp<W>/.
Each round records this rank's dcp.load seconds and, for the mount, the shard bytes the daemon
read for this process (MNT/.zeromount/stats, `pid P bytes N`).
    dcp_load.py MNT WORLD FLOOR_DIR ROUNDS OUT.json [bytes]
With `bytes`: one load of the mount only, on a fresh mount (the kernel has none of its pages
cached), to count what each rank took from the shards."""
import json
import os
import re
import sys
import time

import torch
import torch.distributed as dist

MNT, WORLD, FLOOR, ROUNDS, OUT = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
BYTES_ONLY = sys.argv[6:] == ["bytes"]


def my_bytes():
    text = open(f"{MNT}/.zeromount/stats").read()
    m = re.search(rf"^pid {os.getpid()} bytes (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


def build():
    import oracle_common as oc
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = oc.make_model(perturb=True)
    mesh = init_device_mesh("cpu", (WORLD,))
    for m in (model.embed, model.fc1, model.fc2, model.head):
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(oc.param_groups(model, 2), lr=1e-2)
    return model, opt


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    target = f"{MNT}/layouts/fsdp-dp{WORLD}"

    def load(kind):
        model, opt = build()
        msd, osd = get_state_dict(model, opt)
        dist.barrier()
        before = my_bytes() if kind == "mount" else 0
        t0 = time.perf_counter()
        if kind == "mount":  # Accelerate's load_fsdp_model and load_fsdp_optimizer
            dcp.load({"model": msd}, storage_reader=FileSystemReader(f"{target}/pytorch_model_fsdp_0"))
            dcp.load({"optimizer": osd}, storage_reader=FileSystemReader(f"{target}/optimizer_0"))
        else:
            dcp.load({"model": msd}, storage_reader=FileSystemReader(f"{FLOOR}/pytorch_model_fsdp_0"))
            dcp.load({"optimizer": osd}, storage_reader=FileSystemReader(f"{FLOOR}/optimizer_0"))
        secs = time.perf_counter() - t0
        took = my_bytes() - before if kind == "mount" else 0
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        dist.barrier()
        return model, opt, secs, took

    if BYTES_ONLY:
        _, _, secs, took = load("mount")
        json.dump({"rank": rank, "pid": os.getpid(), "cold_mount_s": secs, "bytes": took},
                  open(OUT.replace(".json", f".rank{rank}.json"), "w"))
        dist.destroy_process_group()
        return
    if not os.path.exists(f"{FLOOR}/optimizer_0/.metadata"):  # torch's own save of the same state
        model, opt, _, _ = load("mount")
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd}, checkpoint_id=f"{FLOOR}/pytorch_model_fsdp_0")
        dcp.save({"optimizer": osd}, checkpoint_id=f"{FLOOR}/optimizer_0")
    rounds = []
    for r in range(ROUNDS):
        row = {}
        for kind in (("floor", "mount") if r % 2 == 0 else ("mount", "floor")):
            _, _, secs, took = load(kind)
            row[kind] = secs
            if kind == "mount":
                row["mount_bytes"] = took
        rounds.append(row)
    json.dump({"rank": rank, "pid": os.getpid(), "rounds": rounds},
              open(OUT.replace(".json", f".rank{rank}.json"), "w"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
