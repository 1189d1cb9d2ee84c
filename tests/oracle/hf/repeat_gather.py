#!/usr/bin/env python3
"""Host side: the same ZeRO-3 GPT-2 dp2 resume, K times each from the real folder and from the mount, to count
how often train.py's final gather (deepspeed.zero.GatheredParameters) returns module weights that are not
the fp32 masters. Usage: repeat_gather.py K  -> $HF_WORK/o23/res/rep__*.json, then `o23.py gathers` checks."""
import concurrent.futures as cf
import sys

import o23

K = int(sys.argv[1]) if len(sys.argv) > 1 else 3
specs = {}
for i in range(K):
    specs[f"rep__gpt2_z3_RN_z3dp2__{i}"] = (2, "gpt2", 3, "fp32", "/w/o23/fix/gpt2_z3/run/checkpoint-2", False)
    specs[f"rep__gpt2_z3_N_z3dp2__{i}"] = (2, "gpt2", 3, "fp32", "/zm-mnt/o23-gpt2_z3/checkpoint-2/layouts/zero3-dp2-fp32", False)
    specs[f"rep__gpt2_z2_U_z3dp2__{i}"] = (2, "gpt2", 3, "fp32", "/zm-mnt/o23-gpt2_z2/checkpoint-2", True)
with cf.ThreadPoolExecutor(o23.JOBS) as ex:
    for fut in cf.as_completed([ex.submit(o23.run_job, k, v) for k, v in specs.items()]):
        print(*fut.result(), flush=True)
