#!/usr/bin/env python3
"""compare.py FSDP2.pt DS.pt: the losses of each step side by side (per rank and the mean over ranks) and the
full fp32 parameters after the steps (elements that differ, max abs and max relative difference)."""
import sys

import torch

a, b = (torch.load(p, weights_only=False) for p in sys.argv[1:3])
print(f"# {sys.argv[1]}  vs  {sys.argv[2]}")
for ra, rb in zip(a["rows"], b["rows"]):
    assert ra["step"] == rb["step"], (ra["step"], rb["step"])
    d = rb["loss_mean"] - ra["loss_mean"]
    per = [f"{x!r}/{y!r}" for x, y in zip(ra["loss_per_rank"], rb["loss_per_rank"])]
    print(f"step {ra['step']}: mean fsdp2 {ra['loss_mean']!r} ds {rb['loss_mean']!r} diff {d:.3e} "
          f"(rel {abs(d) / abs(ra['loss_mean']):.3e}); per rank fsdp2/ds {per}; lr fsdp2 {ra['lr']} ds {rb['lr']}; "
          f"ds grad norm {rb.get('global_grad_norm')}")
ndiff = nel = 0
mabs = mrel = 0.0
for n, t in a["fp32"].items():
    u = b["fp32"][n].to(t.dtype)
    dd = (u - t).abs()
    ndiff += int((dd != 0).sum())
    nel += t.numel()
    mabs = max(mabs, float(dd.max()))
    mrel = max(mrel, float((dd / t.abs().clamp_min(1e-12)).max()))
print(f"fp32 parameters after the steps: {ndiff} of {nel} elements differ; max abs diff {mabs:.3e}, max rel diff {mrel:.3e}")
