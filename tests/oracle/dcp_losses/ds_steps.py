#!/usr/bin/env python3
"""DeepSpeed side of the issue 41 loss comparison (oracle chroot; one process per rank via harness/launch.py).

Loads a native ZeRO layout (a zeromount view of a DCP source) exactly as harness/oracle_load.py --native does
(oracle_common model/optimizer/config, load_optimizer_states and load_lr_scheduler_states True), then trains
--steps more steps on oracle_common.batch(global_steps, rank) and records every rank's loss per step, the lr of
each param group used by the step, the gradient norm DeepSpeed saw, and the full fp32 parameters after the
steps (safe_get_full_fp32_param), for compare.py.

--match-fsdp2: the engine trains like fsdp2_run.py's loop: no lr scheduler (the lr restored from the layout's
optimizer param groups, 1e-2) and no gradient clipping. Without it: the oracle's engine (WarmupLR, clipping 1.0).
"""
import argparse
import os
import sys

sys.path[:0] = [p for p in ("/oracle/harness", "/oracle") if os.path.isdir(p)]
import torch
import torch.distributed as dist
import deepspeed
from deepspeed.utils import safe_get_full_fp32_param

import oracle_common as oc
import gloo_half_shim


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--gloo-half-shim", action="store_true")
    ap.add_argument("--load-dir", required=True)
    ap.add_argument("--tag", default=None)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--match-fsdp2", action="store_true")
    ap.add_argument("--result", required=True, help=".pt written by rank 0")
    a = ap.parse_args()
    gloo_half_shim.install_from(a)
    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = oc.ds_config(a.stage, a.dtype, load_universal=False)
    if a.match_fsdp2:
        cfg.pop("scheduler")
        cfg["gradient_clipping"] = 0.0
    model = oc.make_model(seed=oc.MODEL_SEED + 1, perturb=True)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=oc.make_optimizer(model, 2), config=cfg)
    engine.load_checkpoint(a.load_dir, tag=a.tag, load_optimizer_states=True, load_lr_scheduler_states=True)
    first = engine.global_steps
    rows = []
    for _ in range(a.steps):
        s = engine.global_steps
        tokens, labels = oc.batch(s, rank, engine.device)
        loss = engine(tokens, labels)
        engine.backward(loss)
        lr = [g["lr"] for g in engine.optimizer.param_groups]
        engine.step()
        allv = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(allv, loss.detach().float().reshape(1).cpu())
        gn = engine.get_global_grad_norm()
        rows.append({"step": s, "loss_per_rank": [float(x) for x in allv],
                     "loss_mean": float(sum(float(x) for x in allv) / world), "lr": lr,
                     "global_grad_norm": None if gn is None else float(gn)})
    fp32 = {n: safe_get_full_fp32_param(p).detach().cpu().clone()
            for n, p in engine.module.named_parameters() if p.requires_grad}
    if rank == 0:
        torch.save({"who": "deepspeed", "args": vars(a), "world": world, "first_step": first, "rows": rows,
                    "fp32": fp32, "config": cfg}, a.result)
        for r in rows:
            print("DS", r)
    dist.barrier()
    engine.destroy()


if __name__ == "__main__":
    main()
