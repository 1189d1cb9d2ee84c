"""Cells 1 and 2 (inside the HF chroot): compare every Trainer resume with its reference, bit for bit.

Reference of a resume at target (stage, ranks):
  - the source's own layout: the uninterrupted run (fix/<src>/meta: <src>_train.json losses of steps 3-4
    on every rank, its logged loss/grad_norm/lr, final_state.pt) and a native resume from the real
    checkpoint-2 (job <src>__RN__<t>);
  - any other layout: a resume from the real checkpoint-2 converted by DeepSpeed's own ds_to_universal.py
    (job <src>__RU__<t>, load_universal).
Compared: per-rank losses of the micro-steps after the resume (with each batch's first token and token sum),
the logged loss / grad_norm / learning_rate of steps 3-4, and final_state.pt: module weights, flat fp32
partitions (rank 0's, ZeRO-1/2), full fp32 masters, exp_avg, exp_avg_sq (safe_get_full_*), global_steps, lr.
Writes /w/o23/res/cells12.json and prints a table.
"""
import json
import os
import sys

import torch

O = "/w/o23"
JOBS, SOURCES = {}, {}
STATE_KEYS = ("module", "flat_fp32", "fp32", "exp_avg", "exp_avg_sq", "global_steps", "lr", "param_groups")


def load_json(p):
    return json.load(open(p)) if os.path.exists(p) else None


def run(name):
    """A resume: per-rank losses, logs, final state, log text."""
    r0 = load_json(f"{O}/res/{name}.json")
    if r0 is None:
        return None
    ranks = [r0] + [load_json(f"{O}/res/{name}.rank{i}.json") for i in range(1, r0.get("world_size", 1))]
    fs = f"{O}/runs/{name}/final_state.pt"
    log = open(f"{O}/logs/{name}.log", errors="replace").read() if os.path.exists(f"{O}/logs/{name}.log") else ""
    return {"name": name, "error": r0.get("error"), "losses": [r["losses"] if r else None for r in ranks],
            "logs": steps_logs(r0.get("logs", [])),
            "state": torch.load(fs, weights_only=False) if os.path.exists(fs) else None, "log": log}


def uninterrupted(src):
    m = f"{O}/fix/{src}/meta"
    r0 = load_json(f"{m}/{src}_train.json")
    ranks = [r0] + [load_json(f"{m}/{src}_train.rank{i}.json") for i in range(1, r0["world_size"])]
    return {"name": f"{src} uninterrupted", "error": None,
            "losses": [[x for x in r["losses"] if x[0] >= 2] for r in ranks],
            "logs": steps_logs(r0["logs"]), "state": torch.load(f"{m}/final_state.pt", weights_only=False), "log": ""}


def steps_logs(logs):
    return {l["step"]: {k: l[k] for k in ("loss", "grad_norm", "learning_rate") if k in l}
            for l in logs if l.get("step", 0) >= 3 and "loss" in l}


def teq(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(teq(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(teq(p, q) for p, q in zip(x, y))
    return x == y


def diff_names(x, y):
    if isinstance(x, dict) and isinstance(y, dict):
        return sorted(k for k in x.keys() | y.keys() if not teq(x.get(k), y.get(k)))
    return []


def compare(a, b):
    """field -> True / False / None (not comparable), plus details"""
    out, detail = {}, {}
    if a is None or b is None or a["error"] or b["error"]:
        return {"ran": False}, {}
    out["losses"] = all(x == y for x, y in zip(a["losses"], b["losses"])) and len(a["losses"]) == len(b["losses"])
    out["logs"] = a["logs"] == b["logs"]
    for k in STATE_KEYS:
        x, y = a["state"].get(k), b["state"].get(k)
        if x is None or y is None:
            out[k] = None
        else:
            out[k] = teq(x, y)
            if not out[k]:
                detail[k] = diff_names(x, y)[:4]
                if k == "module" and isinstance(x, dict):
                    detail["module_max_abs"] = max(float((x[n].float() - y[n].float()).abs().max())
                                                   for n in x if n in y and x[n].shape == y[n].shape)
    if a["logs"] != b["logs"] and a["logs"].keys() == b["logs"].keys():
        detail["grad_norm"] = {s: (a["logs"][s].get("grad_norm"), b["logs"][s].get("grad_norm")) for s in a["logs"]
                               if a["logs"][s] != b["logs"][s]}
    return out, detail


LIVE = {}


def loaded_vs_live(name, src, live_path=None):
    """train_probe.py's loaded_state.pt (after the load, before step 3) against the source's live state at
    step 2: module weights, fp32 masters, exp_avg, exp_avg_sq by name; ZeRO-1/2 targets: rank 0's flat fp32
    partition of each group against the concatenation of the live masters of that group's parameters."""
    f = f"{O}/runs/{name}/loaded_state.pt"
    if not os.path.exists(f):
        return None
    if src not in LIVE:
        LIVE[src] = torch.load(live_path or f"{O}/fix/{src}/meta/live_state_step2.pt", weights_only=False)
    live, got = LIVE[src], torch.load(f, weights_only=False)
    out = {}
    for k in ("module", "fp32", "exp_avg", "exp_avg_sq"):
        out[k] = teq(got[k], live[k])
        if not out[k]:
            out[k + "_differ"] = diff_names(got[k], live[k])[:4]
    if got.get("flat_fp32") is not None and got.get("group_names"):
        ok = True
        for flat, names in zip(got["flat_fp32"], got["group_names"]):
            cat = torch.cat([live["fp32"][n].reshape(-1) for n in names])
            k = min(flat.numel(), cat.numel())
            ok = ok and torch.equal(flat[:k], cat[:k]) and bool((flat[k:] == 0).all())
        out["flat_fp32"] = ok
    out["global_steps"] = got.get("global_steps")
    out["weight_decay"] = [g.get("weight_decay") for g in got.get("param_groups", [])]
    return out


def refs(name):
    """the DeepSpeed-made runs at the same DP size (the same batches) a job is compared with"""
    src, kind, t = name.split("__")
    stage, n = int(t[1]), int(t.split("dp")[1])
    m, s0, d, n0 = SOURCES[src]
    out = []
    if n == n0 and kind not in ("RXU",):
        out.append("uninterrupted")
    if (stage, n) == (s0, n0) and kind != "RN":
        out.append(f"{src}__RN__{t}")
    for k in ("RU", "RUF", "RUL"):
        for st in (stage, 5 - stage):   # the target's stage first, then the other one (cross-stage)
            r = f"{src}__{k}__z{st}dp{n}"
            if r != name and r in JOBS:
                out.append(r)
    if kind == "U":
        out.append(f"{src}__N__{t}")
    return out


def main():
    J = json.load(open(f"{O}/py/jobs.json"))
    JOBS.update(J["jobs"])
    SOURCES.update(J["sources"])
    cache = {}

    def get(r, src):
        key = f"{src}:{r}" if r == "uninterrupted" else r
        if key not in cache:
            cache[key] = uninterrupted(src) if r == "uninterrupted" else run(r)
        return cache[key]

    rows = []
    for name, spec in JOBS.items():
        src, kind, t = name.split("__")
        a = get(name, src)
        row = {"job": name, "src": src, "kind": kind, "target": t, "path": spec[4], "load_universal": spec[5],
               "ran": a is not None, "error": (a or {}).get("error"), "cmp": {}}
        if a is not None:
            row["rng_missing"] = "Didn't find an RNG file" in a["log"]
            row["loaded"] = loaded_vs_live(name, src)
            row["losses"] = a["losses"]
            for r in refs(name):
                if r == name:
                    continue
                c, d = compare(a, get(r, src))
                row["cmp"][r] = {"fields": c, "diff": d}
        rows.append(row)
    json.dump(rows, open(f"{O}/res/cells12.json", "w"), indent=1, default=str)
    for row in rows:
        if not row["ran"]:
            print(f"{row['job']:38s} not run")
            continue
        if row["error"]:
            print(f"{row['job']:38s} ERROR {row['error'].strip().splitlines()[-1][:150]}")
            continue
        if row.get("loaded"):
            print(f"{row['job']:38s} loaded vs live step 2: {row['loaded']}")
        for r, c in row["cmp"].items():
            f = c["fields"]
            s = " ".join(f"{k}={'=' if v else ('n/a' if v is None else 'DIFF')}" for k, v in f.items())
            print(f"{row['job']:38s} vs {r:30s} {s} {c['diff'] if c['diff'] else ''} rng_missing={row['rng_missing']}")


if __name__ == "__main__":
    main()
