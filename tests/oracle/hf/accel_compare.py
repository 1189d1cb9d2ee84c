"""Cell 4 (inside the HF chroot): compare each accelerator.load_state resume (accel_train.py) with its
reference: at the saving layout (ZeRO-2, 2 ranks) the uninterrupted Accelerate run and a load_state of the
real checkpoint_0; at any other layout a load_state of the real checkpoint_0 whose pytorch_model/ tag is
DeepSpeed's own ds_to_universal.py output (checkpoint.load_universal). Writes /w/o23/res/cell4.json."""
import json
import os

import torch

from compare import compare, load_json, loaded_vs_live, run

O = "/w/o23"


def uninterrupted():
    r0 = load_json(f"{O}/res/acc_z2__save.json")
    ranks = [r0] + [load_json(f"{O}/res/acc_z2__save.rank{i}.json") for i in range(1, r0["world_size"])]
    return {"name": "uninterrupted", "error": r0["error"], "losses": [[x for x in r["losses"] if x[0] >= 2] for r in ranks],
            "logs": {}, "state": torch.load(f"{O}/accel/z2/final_state.pt", weights_only=False), "log": ""}


def main():
    acc = json.load(open(f"{O}/py/accel_jobs.json"))
    rows, cache = [], {"uninterrupted": uninterrupted()}
    for name, (n, stage, path, uni) in acc.items():
        a = run(name)
        t = name.split("__")[2]
        n_ = t.split("dp")[1]
        refs = (["uninterrupted"] if n_ == "2" else []) + (["acc_z2__RN__z2dp2"] if t == "z2dp2" else []) + \
            [r for r in (f"acc_z2__RU__{t}", f"acc_z2__RU__z{5 - int(t[1])}dp{n_}") if r in acc]
        row = {"job": name, "ranks": n, "stage": stage, "path": path, "load_universal": uni,
               "error": (a or {}).get("error"), "losses": (a or {}).get("losses"), "cmp": {}}
        if a and not a["error"]:
            row["loaded"] = loaded_vs_live(name, "accel_z2", f"{O}/accel/z2/live_state_step2.pt")
            print(f"{name:22s} loaded vs live step 2: {row['loaded']}")
            for r in refs:
                if r == name:
                    continue
                if r not in cache:
                    cache[r] = run(r)
                c, d = compare(a, cache[r])
                row["cmp"][r] = {"fields": c, "diff": d}
        rows.append(row)
        if row["error"]:
            print(f"{name:22s} ERROR {row['error'].strip().splitlines()[-1][:200]}")
        for r, c in row["cmp"].items():
            s = " ".join(f"{k}={'=' if v else ('n/a' if v is None else 'DIFF')}" for k, v in c["fields"].items())
            print(f"{name:22s} vs {r:20s} {s} {c['diff'] or ''}")
    json.dump(rows, open(f"{O}/res/cell4.json", "w"), indent=1, default=str)


if __name__ == "__main__":
    main()
