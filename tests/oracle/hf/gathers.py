"""Inside the chroot: for every state train.py / train_probe.py gathered in a ZeRO-3 run (loaded_state.pt after the
load, live_state_step<N>.pt at the Trainer's saves, final_state.pt after training; resumes and the uninterrupted
sources), the parameters whose gathered module weight is not the fp32 master (rounded to the module dtype).
Writes /w/o23/res/gathers.json."""
import glob
import json
import os

import torch

out = {}
for f in sorted(glob.glob("/w/o23/runs/*/*state*.pt") + glob.glob("/w/o23/fix/*/meta/*state*.pt")):
    u = torch.load(f, weights_only=False)
    if "module" not in u or "flat_fp32" in u:   # ZeRO-1/2: fp32 may be D1's exp_avg_sq; not a gather
        continue
    bad = {n: int((m != u["fp32"][n].to(m.dtype)).sum()) for n, m in u["module"].items()
           if not torch.equal(m, u["fp32"][n].to(m.dtype))}
    out[os.path.relpath(f, "/w/o23")] = bad
json.dump(out, open("/w/o23/res/gathers.json", "w"), indent=1)
kinds = {}
for k, v in out.items():
    kind = os.path.basename(k).split("_step")[0].replace(".pt", "")
    real = not any(x in k for x in ("__U__", "__N__", "_U_", "_N_"))
    c = kinds.setdefault((kind, "real folder / uninterrupted" if real else "mount"), [0, 0])
    c[0] += 1
    c[1] += bool(v)
for (kind, where), (n, bad) in sorted(kinds.items()):
    print(f"{kind:12s} {where:28s} {bad} of {n} with a gathered module weight that is not its master")
print(f"{len(out)} ZeRO-3 states; with a gathered weight that is not its master:")
for k, v in out.items():
    if v:
        print(" ", k, v)
