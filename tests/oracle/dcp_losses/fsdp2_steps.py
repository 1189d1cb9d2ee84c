#!/usr/bin/env python3
"""FSDP2 side of the issue 41 loss comparison (oracle chroot). Loads a real DCP fixture (an fsdp2_run.py save)
into FSDP2 at W ranks with the writer's own loader (fsdp2_judge.load_candidate, proven bit-exact by the judge),
then continues fsdp2_run.py's own training loop for --steps steps: step s on rank r trains on
oracle_common.batch(s, r), FSDP2's backward (reduce-scatter averages the gradients), AdamW step, running_mean
averaged over ranks. No gradient clipping; the lr restored from the checkpoint (1e-2; the torchtitan / hf-fsdp
runs' LambdaLR is constant, so it is not stepped here). Records every rank's loss per step and the full fp32
parameters after the steps.

  python3 fsdp2_steps.py CANDIDATE --meta META --world W --steps 2 --result OUT.pt
"""
import argparse
import json
import os
import sys

sys.path[:0] = [p for p in ("/oracle/harness", "/oracle") if os.path.isdir(p)]
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import oracle_common as oc
import fsdp2_run as fr
import fsdp2_judge as fj


def worker(rank, a, cfg, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    try:
        mesh, model, opt, sched = fr.build(cfg, a.world, seed=fj.PERTURB_SEED, perturb=True)
        fj.load_candidate(a.layout, a.path, model, opt, cfg, rank, a.world)
        rows = []
        for s in range(cfg["steps"], cfg["steps"] + a.steps):
            tokens, labels = oc.batch(s, rank)
            loss = model(tokens, labels)
            loss.backward()
            lr = [g["lr"] for g in opt.param_groups]
            opt.step()
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                for b in model.buffers():
                    dist.all_reduce(b)
                    b.div_(a.world)
            allv = [torch.zeros(1) for _ in range(a.world)]
            dist.all_gather(allv, loss.detach().float().reshape(1))
            rows.append({"step": s, "loss_per_rank": [float(x) for x in allv],
                         "loss_mean": float(sum(float(x) for x in allv) / a.world), "lr": lr})
        st = fr.gather_state(model, opt)
        if rank == 0:
            torch.save({"who": "fsdp2", "candidate": a.candidate, "world": a.world, "rows": rows,
                        "fp32": st["fp32"]}, a.result)
            for r in rows:
                print("FSDP2", r)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("candidate")
    ap.add_argument("--meta", required=True)
    ap.add_argument("--world", type=int, default=None)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--result", required=True)
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.meta, "train.json")))["config"]
    cfg = dict(world=c["world"], steps=c["steps"], dtype=c["dtype"], tie=c["tie"], lr_scheduler=c["lr_scheduler"],
               has_optimizer=True)
    a.world = a.world or cfg["world"]
    hint, a.path = fj.resolve(a.candidate)
    a.layout = hint or fj.detect_layout(a.path)
    mp.spawn(worker, args=(a, cfg, fr.free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
