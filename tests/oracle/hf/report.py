#!/usr/bin/env python3
"""Markdown tables of issue 23's oracle from the JSON the other scripts wrote ($HF_WORK/o23/res/cells12.json,
cell3.json, cell4.json, cell5.json). Host side, no torch. Usage: report.py > table.md"""
import json
import os

RES = os.path.join(os.environ.get("HF_WORK", "/tmp/ds-hf/work"), "o23", "res")
SRC = {"llama_z3": "Llama ZeRO-3 fp32 dp2", "gpt2_z2": "GPT-2 (tied) ZeRO-2 fp32 dp2",
       "llama_z2_bf16": "Llama ZeRO-2 bf16 dp2", "llama_z3_bf16": "Llama ZeRO-3 bf16 dp2",
       "llama_z2_dp1": "Llama ZeRO-2 fp32 dp1", "gpt2_z3": "GPT-2 (tied) ZeRO-3 fp32 dp2"}
DTYPE = {"llama_z3": "fp32", "gpt2_z2": "fp32", "llama_z2_bf16": "bf16", "llama_z3_bf16": "bf16",
         "llama_z2_dp1": "fp32", "gpt2_z3": "fp32"}
ABBR = {"RN": "R", "RU": "C", "RUF": "C'", "RUL": "CL", "N": "N"}
LEGEND = ("U = the uninterrupted run; R = a native resume from the real checkpoint-2; C = a resume from "
          "ds_to_universal.py's output of the real checkpoint-2 (load_universal); CL = the same from "
          "ds_to_universal.py run on the mount's layouts/zero3-dp2-fp32; N = this target's native layout (cell 2); "
          "x(2) / x(3) = that run at ZeRO-2 / ZeRO-3 when the stage differs; D1, D2, D3: DeepSpeed's own (below)")


def load(name):
    p = os.path.join(RES, name)
    return json.load(open(p)) if os.path.exists(p) else None


def abbr(r, stage):
    if r == "uninterrupted":
        return "U"
    src, kind, t = r.split("__")
    a = ABBR.get(kind, kind)
    return a if int(t[1]) == stage else f"{a}({t[1]})"


def full_equal(f, d1):
    """every compared field equal; fp32 (safe_get_full_fp32_param) may differ where a ZeRO-1/2 universal
    load is on either side (DeepSpeed returns exp_avg_sq there: D1)"""
    return all(v in (True, None) or (k == "fp32" and d1) for k, v in f.items())


def loaded_text(L, kind, stage):
    if not L:
        return "n/a"
    ok = all(L.get(k) for k in ("module", "exp_avg", "exp_avg_sq")) and L.get("flat_fp32", True)
    if not ok:
        return "DIFFERS: " + ", ".join(k for k, v in L.items() if v is False)
    t = "module, moments" + (", flat fp32" if "flat_fp32" in L else "") + (", fp32" if L.get("fp32") else "")
    t += " equal" + ("" if L.get("fp32") else "; fp32: D1")
    if L.get("weight_decay") and L["weight_decay"][-1] != 0.0:
        t += f"; wd {L['weight_decay']}: D2"
    return t


def d3(job, ref, c):
    """only the module weights differ, and only parameters whose gathered weight in one of the two final states
    is not its fp32 master (gathers.json: DeepSpeed's ZeRO-3 gather, D3)"""
    g = load("gathers.json") or {}
    flagged = set(g.get(f"runs/{job}/final_state.pt", {})) | set(g.get(f"runs/{ref}/final_state.pt", {}))
    f = c["fields"]
    return (f.get("module") is False and flagged and set(c["diff"].get("module", [])) <= flagged
            and all(v in (True, None) for k, v in f.items() if k != "module"))


def cells12():
    rows = load("cells12.json") or []
    out = ["| cell | source (ranks) | target | ranks | after the load vs live step 2 | steps 3-4 and final state | result |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        src, kind, t = r["job"].split("__")
        if kind not in ("U", "N"):
            continue
        stage, n = int(t[1]), int(t.split("dp")[1])
        target = f"`zero{stage}-dp{n}-{DTYPE[src]}`"
        cell = "1 universal" if kind == "U" else "2 native"
        if not r.get("ran"):
            out.append(f"| {cell} | {SRC[src]} | {target} | {n} | – | – | not run |")
            continue
        if r.get("error"):
            out.append(f"| {cell} | {SRC[src]} | {target} | {n} | – | – | FAILED: {r['error'].strip().splitlines()[-1][:120]} |")
            continue
        L = r.get("loaded") or {}
        lok = bool(L) and all(L.get(k) for k in ("module", "exp_avg", "exp_avg_sq")) and L.get("flat_fp32", True)
        eq, loss_only = [], []
        for ref, c in r["cmp"].items():
            f = c["fields"]
            if f.get("ran") is False:
                continue
            d1 = stage < 3 and (kind == "U" or (ref.split("__") + ["", ""])[1] in ("RU", "RUF", "RUL"))
            if d3(r["job"], ref, c):
                eq.append(abbr(ref, stage) + " (module: D3)")
                continue
            (eq if full_equal(f, d1) else loss_only if f.get("losses") else []).append(abbr(ref, stage))
        s = ("= " + ", ".join(eq)) if eq else ""
        if loss_only:
            s += ("; " if s else "") + "losses = " + ", ".join(loss_only)
        rng = "; Trainer: no rng_state file" if r.get("rng_missing") else ""
        out.append(f"| {cell} | {SRC[src]} | {target} | {n} | {loaded_text(L, kind, stage)} | {s or '–'} | "
                   f"{'ok' if lok else 'FAIL'}{rng} |")
    return LEGEND + "\n\n" + "\n".join(out)


def refs_table():
    rows = load("cells12.json") or []
    out = ["| reference run | ranks | result |", "|---|---|---|"]
    for r in rows:
        src, kind, t = r["job"].split("__")
        if kind in ("U", "N"):
            continue
        res = "ran" if not r.get("error") else "FAILED: " + r["error"].strip().splitlines()[-1][:160]
        if not r.get("error") and "uninterrupted" in r["cmp"]:
            f = r["cmp"]["uninterrupted"]["fields"]
            res += "; = uninterrupted" if full_equal(f, kind != "RN" and int(t[1]) < 3) else \
                ("; losses = uninterrupted" if f.get("losses") else "; ≠ uninterrupted")
        out.append(f"| `{r['job']}` ({r['path']}{', load_universal' if r['load_universal'] else ''}) | {t} | {res} |")
    return "\n".join(out)


def cell3():
    rows = load("cell3.json") or []
    out = ["| mount | folder | files besides weights | from_pretrained vs live step 2 | vs DeepSpeed zero_to_fp32.py --safe_serialization |",
           "|---|---|---|---|---|"]
    for r in rows:
        files = ", ".join(f for f in r["files"] if not f.startswith("model"))
        shards = [f for f in r["files"] if f.startswith("model") and f.endswith(".safetensors")]
        if "tokenizer_class" in r:
            out.append(f"| {r['folder'].split('/')[2]} | `{r['folder'].split('/', 3)[3]}` | {files} | AutoTokenizer "
                       f"({r['tokenizer_class']}): encode/vocab = real folder: {r['encode_equal']}; tokenizer files "
                       f"byte-equal: {r['tokenizer_files_bytes_equal']}; model = live masters: {r['model_vs_live']['equal']} | – |")
            continue
        bits = [f"dtype {r.get('param_dtype')}"]
        for k, label in (("vs_live_fp32_masters", "= masters"), ("vs_live_masters_rounded", "= masters→bf16"),
                         ("vs_live_module", "= live bf16 module"), ("vs_trainer_model_safetensors", "= Trainer's model.safetensors")):
            if k in r:
                bits.append(f"{label}: {r[k]['equal']}")
        if "dtype_float32" in r:
            bits.append(f"with dtype=torch.float32: = masters: {r['dtype_float32']['vs_live_fp32_masters']['equal']}")
        if "lm_head_tied" in r:
            bits.append(f"lm_head is wte: {r['lm_head_tied']}")
        bits.append(f"missing/unexpected keys: {r.get('loading_info') or 'none'}")
        z = r.get("zero_to_fp32")
        zs = "–" if z is None else (f"DeepSpeed fails: {z['error'].strip()[:90]}" if z.get("error") else
                                     f"names {z['names_equal']}, index bytes {z.get('index_bytes_equal', 'n/a')}, tensors {z['tensors_equal']}")
        out.append(f"| {r['mount']} | `{r['folder'].split('/', 3)[3]}` ({len(shards)} shard{'s' if len(shards) > 1 else ''}) | {files} | "
                   f"{'; '.join(bits)} | {zs} |")
    return "\n".join(out)


def cell4():
    rows = load("cell4.json") or []
    out = ["| job | ranks, stage | load_state path | state after load_state vs live step 2 | steps 3-4 and final state | result |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            out.append(f"| `{r['job']}` | {r['ranks']}, ZeRO-{r['stage']} | `{r['path']}`{' + load_universal' if r['load_universal'] else ''} "
                       f"| – | – | FAILED: {r['error'].strip().splitlines()[-1][:140]} |")
            continue
        L = r.get("loaded") or {}
        lok = all(L.get(k) for k in ("module", "exp_avg", "exp_avg_sq")) and L.get("flat_fp32", True)
        eq, loss_only, failed = [], [], []
        for ref, c in r["cmp"].items():
            f = c["fields"]
            if f.get("ran") is False:
                failed.append(ref)
            elif full_equal(f, "RU" in ref or r["load_universal"]):
                eq.append(ref)
            elif f.get("losses"):
                loss_only.append(ref)
        s = "; ".join(x for x in (("bit-equal to " + ", ".join(eq)) if eq else "",
                                  ("losses equal to " + ", ".join(loss_only)) if loss_only else "",
                                  ("no DeepSpeed run: " + ", ".join(failed)) if failed else "") if x)
        out.append(f"| `{r['job']}` | {r['ranks']}, ZeRO-{r['stage']} | `{r['path']}`{' + load_universal' if r['load_universal'] else ''} | "
                   f"{'bit-equal' if lok else 'DIFFERS'} (fp32 {'=' if L.get('fp32') else '≠ D1'}) | {s or '–'} | {'ok' if lok else 'FAIL'} |")
    return "\n".join(out)


def cell5():
    rows = load("cell5.json") or []
    out = ["| what | exit | DeepSpeed / HF says |", "|---|---|---|"]
    for r in rows:
        out.append(f"| {r['what']} | {r['rc']} | {r['last'][:220].replace('|', '/')} |")
    return "\n".join(out)


if __name__ == "__main__":
    for title, f in (("Cells 1 and 2", cells12), ("Reference runs", refs_table), ("Cell 3", cell3), ("Cell 4", cell4),
                     ("Cell 5", cell5)):
        print(f"### {title}\n\n{f()}\n")
