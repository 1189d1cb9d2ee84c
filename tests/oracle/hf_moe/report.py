#!/usr/bin/env python3
"""Markdown table from /tmp/hf-oracle/work/res/{stcmp,hfcheck,fsdp2}_<NAME>.json"""
import json, os, sys
RES = "/tmp/hf-oracle/work/res"
names = sys.argv[1:]


def j(p):
    p = f"{RES}/{p}"
    return json.load(open(p)) if os.path.exists(p) else None


yn = lambda b: "yes" if b else "**no**"
print("| model_type | ZeRO | dtype | keys runtime → saved (Trainer) | key sets equal | shapes equal | dtypes equal | bytes equal | 100KB shards: keys/bytes equal | from_pretrained = live (1 file / shards) | FSDP2 loads `_dcp` = live | `runtime` folder = `zero_to_fp32.py` |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for n in names:
    st, hc, fs, zf = j(f"stcmp_{n}.json"), j(f"hfcheck_{n}.json"), j(f"fsdp2_{n}.json"), j(f"z2f_{n}.json")
    if st is None:
        continue
    m, z, dt = n.rsplit("_", 2)
    z = z[1:]
    folder = "global_step2_bf16" if dt == "bf16" else "global_step2_fp32"
    s, ss, r = st[f"{n}/{folder}"], st[f"{n}-s/{folder}"], st[f"{n}-r/{folder}"]
    if "error" in s:
        print(f"| {m} | {z} | {dt} | error: {s['error']} |"); continue
    keys = f"{r['keys_a']} → {s['keys_a']} ({s['keys_b']})"
    dtypes = yn(s["dtypes_equal"]) + f" ({'/'.join(s['dtypes_a'])})"
    sh = f"{yn(ss['keys_equal'])}/{yn(ss['bytes_equal'])} ({len([f for f in ss['files_a'] if f.endswith('.safetensors')])} shards)"
    fp = "–"
    if hc:
        def ok(k, c):
            x = hc.get(k, {})
            return x.get(c, {}).get("equal") if "error" not in x else None
        if dt == "fp32":
            a, b = ok(f"{n}/global_step2_fp32", "vs_live_fp32_masters"), ok(f"{n}-s/global_step2_fp32", "vs_live_fp32_masters")
            fp = f"{yn(a)} / {yn(b)}"
        else:
            a = ok(f"{n}/global_step2_bf16", "vs_live_bf16_module"); b = ok(f"{n}-s/global_step2_bf16", "vs_live_bf16_module")
            c = ok(f"{n}/global_step2_fp32", "vs_live_fp32_masters"); d = ok(f"{n}-s/global_step2_fp32", "vs_live_fp32_masters")
            fp = f"`_bf16`: {yn(a)} / {yn(b)}; `_fp32` (dtype=float32) = masters: {yn(c)} / {yn(d)}"
        nan = hc.get(f"{n}/{folder}", {}).get("vs_live_fp32_masters" if dt == "fp32" else "vs_live_bf16_module", {}).get("params_with_nan")
        if nan:
            fp += f" (NaN in {nan} params: compared bitwise)"
    f2 = "–"
    if fs:
        f2 = "error" if "error" in fs else f"params {yn(fs['params_equal_live_fp32'])}, exp_avg(_sq) {yn(fs['exp_avg_equal'] and fs['exp_avg_sq_equal'])}, {fs['model_keys']} keys"
    z2 = "–" if zf is None else ("yes" if zf["bytes_equal"] else "all but " + ", ".join(f"`{k}` {a} vs {b}" for k, a, b in zf["dtype_bad"]))
    print(f"| {m} | {z} | {dt} | {keys} | {yn(s['keys_equal'])} | {yn(s['shapes_equal'])} | {dtypes} | {yn(s['bytes_equal'])} | {sh} | {fp} | {f2} | {z2} |")
