#!/usr/bin/env python3
"""check_from_pretrained.py LIVE_MODEL.pt WEIGHTS_DIR: AutoModelForCausalLM.from_pretrained(WEIGHTS_DIR, fp32) and
compare its state dict with the live model's, bit for bit (names, dtypes, shapes, bytes). Prints PASS/FAIL."""
import sys

import torch
from transformers import AutoModelForCausalLM

live = torch.load(sys.argv[1], weights_only=False)
m, info = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32, output_loading_info=True)
got = m.state_dict()
bad = [f"loading_info {k}: {v}" for k, v in info.items() if v]
for k in sorted(set(live) | set(got)):
    if k not in got or k not in live:
        bad.append(f"{k}: only in {'live' if k in live else 'loaded'}")
        continue
    a, b = live[k], got[k]
    if a.dtype != b.dtype or a.shape != b.shape:
        bad.append(f"{k}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    elif not torch.equal(a.view(torch.uint8) if a.dtype != torch.bool else a, b.view(torch.uint8) if b.dtype != torch.bool else b):
        bad.append(f"{k}: {int((a != b).sum())} of {a.numel()} elements differ, max abs {float((a - b).abs().max()):.3e}")
print(("PASS" if not bad else "FAIL") + f" {sys.argv[2]}: {len(live)} live tensors, {len(got)} loaded, "
      f"{type(m).__name__}" + ("" if not bad else "; " + "; ".join(bad[:8])))
sys.exit(0 if not bad else 1)
