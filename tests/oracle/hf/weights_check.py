"""Cell 3 (inside the HF chroot): AutoModelForCausalLM.from_pretrained of every weights folder of the
mounts, against the live fp32 masters of step 2 (fix/<src>/meta/live_state_step2.pt) and the live module
weights, against from_pretrained of the Trainer's own checkpoint-2 (its model.safetensors), and against
DeepSpeed's own `zero_to_fp32.py --safe_serialization [--max_shard_size 200KB]` run on the real folder.
AutoTokenizer on the mount of a copy of llama_z3 whose checkpoint-2 holds tokenizer files.
Writes /w/o23/res/cell3.json."""
import json
import os
import subprocess
import traceback

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

O = "/w/o23"
SOURCES = {"llama_z3": "fp32", "gpt2_z2": "fp32", "llama_z2_bf16": "bf16", "llama_z3_bf16": "bf16",
           "llama_z2_dp1": "fp32", "gpt2_z3": "fp32"}
# the copy the Trainer leaves in every checkpoint-N/ (running /ds/deepspeed/utils/zero_to_fp32.py directly puts
# deepspeed/utils on sys.path, whose types.py and logging.py shadow the standard library's)


def load(d, dtype=None):
    kw = {} if dtype is None else {"dtype": dtype}
    m, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True, **kw)
    info = {k: sorted(map(str, v)) for k, v in info.items() if v}
    return m, info


def params(m):
    return {n: p.detach() for n, p in m.named_parameters()}


def cmp_params(got, want, cast=None):
    bad = []
    for n, w in want.items():
        g = got.get(n)
        w = w if cast is None else w.to(cast)
        if g is None or g.dtype != w.dtype or g.shape != w.shape or not torch.equal(g, w):
            bad.append(n)
    extra = sorted(set(got) - set(want))
    return {"equal": not bad and not extra, "compared": len(want), "differ": bad[:6], "extra": extra[:6]}


def folder_files(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def z2f(src, shard):
    out = f"{O}/z2f/{src}{'-s' if shard else ''}"
    subprocess.run(["rm", "-rf", out])
    ck = f"{O}/fix/{src}/run/checkpoint-2"
    cmd = ["python3", f"{ck}/zero_to_fp32.py", ck, out, "--safe_serialization"]
    if shard:
        cmd += ["--max_shard_size", "200KB"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l.strip() for l in r.stderr.strip().splitlines() if l.strip()] or ["?"]
    i = next((k for k in range(len(lines) - 1, -1, -1) if "Error" in lines[k]), len(lines) - 1)
    err = None if r.returncode == 0 else " ".join(lines[i:i + 2])
    return out, err


def vs_zero_to_fp32(mnt_dir, ref_dir):
    """names of the weight files, index.json bytes, every tensor"""
    a = sorted(f for f in os.listdir(mnt_dir) if f.startswith("model"))
    b = sorted(f for f in os.listdir(ref_dir) if f.startswith("model"))
    res = {"files_mount": a, "files_zero_to_fp32": b, "names_equal": a == b}
    if "model.safetensors.index.json" in a and a == b:
        res["index_bytes_equal"] = (open(f"{mnt_dir}/model.safetensors.index.json", "rb").read()
                                    == open(f"{ref_dir}/model.safetensors.index.json", "rb").read())
    ta, tb = {}, {}
    for f in a:
        if f.endswith(".safetensors"):
            ta.update(load_file(f"{mnt_dir}/{f}"))
    for f in b:
        if f.endswith(".safetensors"):
            tb.update(load_file(f"{ref_dir}/{f}"))
    res["tensors_equal"] = ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) and ta[k].dtype == tb[k].dtype for k in ta)
    res["keys_only_mount"] = sorted(set(ta) - set(tb))
    return res


def main():
    out = []
    for src, dtype in SOURCES.items():
        live = torch.load(f"{O}/fix/{src}/meta/live_state_step2.pt", weights_only=False)
        real_ck = f"{O}/fix/{src}/run/checkpoint-2"
        try:
            trainer_model, _ = load(real_ck)
            trainer_params = params(trainer_model)
        except Exception as e:
            trainer_params = None
        for suffix in ("", "-s"):
            ref_dir, ref_err = z2f(src, suffix == "-s")
            for view in ["fp32"] + ([dtype] if dtype != "fp32" else []):
                d = f"/zm-mnt/o23-{src}{suffix}/checkpoint-2/global_step2_{view}"
                row = {"src": src, "mount": f"o23-{src}{suffix}", "folder": d, "files": sorted(os.listdir(d))}
                try:
                    m, info = load(d)
                    got = params(m)
                    row["loading_info"] = info
                    row["param_dtype"] = str(next(iter(got.values())).dtype)
                    if view == "fp32":
                        row["vs_live_fp32_masters"] = cmp_params(got, live["fp32"])
                        if dtype != "fp32":   # config.json says bfloat16: from_pretrained's default dtype="auto" casts
                            row["vs_live_masters_rounded"] = cmp_params(got, live["fp32"], torch.bfloat16)
                            m32, _ = load(d, torch.float32)
                            row["dtype_float32"] = {"param_dtype": str(next(m32.parameters()).dtype),
                                                    "vs_live_fp32_masters": cmp_params(params(m32), live["fp32"])}
                    else:
                        row["vs_live_module"] = cmp_params(got, live["module"])
                        row["vs_live_masters_rounded"] = cmp_params(got, live["fp32"], torch.bfloat16)
                    if hasattr(m, "lm_head") and getattr(m.config, "tie_word_embeddings", False):
                        row["lm_head_tied"] = m.lm_head.weight is m.get_input_embeddings().weight
                    # the Trainer's own model.safetensors holds the module weights in the training precision
                    if view == dtype and trainer_params is not None:
                        row["vs_trainer_model_safetensors"] = cmp_params(got, trainer_params)
                    for f in ("config.json", "generation_config.json"):
                        row[f"{f}_bytes_equal"] = open(f"{d}/{f}", "rb").read() == open(f"{real_ck}/{f}", "rb").read()
                except Exception:
                    row["error"] = traceback.format_exc().strip().splitlines()[-1]
                if view == "fp32":
                    row["zero_to_fp32"] = {"error": ref_err} if ref_err else vs_zero_to_fp32(d, ref_dir)
                out.append(row)
                print(json.dumps(row)[:1500], flush=True)
    # AutoTokenizer: a copy of llama_z3 whose checkpoint-2 holds the files a Trainer with a tokenizer writes
    tok_real = f"{O}/fix/llama_z3_tok/run/checkpoint-2"
    if os.path.isdir("/zm-mnt/o23-llama_z3-tok/checkpoint-2"):
        d = "/zm-mnt/o23-llama_z3-tok/checkpoint-2/global_step2_fp32"
        real_files = {f for f in os.listdir(tok_real) if f.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template"))}
        row = {"src": "llama_z3_tok", "folder": d, "files": sorted(os.listdir(d)), "tokenizer_files_real": sorted(real_files)}
        row["tokenizer_files_bytes_equal"] = all(open(f"{d}/{f}", "rb").read() == open(f"{tok_real}/{f}", "rb").read() for f in real_files)
        try:
            a, b = AutoTokenizer.from_pretrained(d), AutoTokenizer.from_pretrained(tok_real)
            s = "t1 t2 t200 t7 zz"
            row["tokenizer_class"] = type(a).__name__
            row["encode_equal"] = a(s)["input_ids"] == b(s)["input_ids"] and a.get_vocab() == b.get_vocab()
            row["encode"] = a(s)["input_ids"]
            m, info = load(d)
            row["model_vs_live"] = cmp_params(params(m), torch.load(f"{O}/fix/llama_z3/meta/live_state_step2.pt", weights_only=False)["fp32"])
        except Exception:
            row["error"] = traceback.format_exc().strip().splitlines()[-1]
        out.append(row)
        print(json.dumps(row), flush=True)
    json.dump(out, open(f"{O}/res/cell3.json", "w"), indent=1)


if __name__ == "__main__":
    main()
