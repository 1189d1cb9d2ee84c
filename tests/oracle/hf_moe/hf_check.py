"""Inside the HF chroot: from_pretrained of the mount's weights folders vs the live state at step 2.
Usage: python3 hf_check.py NAME [NAME...]  (mounts at /zm-mnt/<NAME>, runs at /w/runs/<NAME>) -> /w/res/hfcheck_<NAME>.json"""
import json, os, sys, traceback
import torch
from transformers import AutoModelForCausalLM


def load(d, dtype):
    cls = AutoModelForCausalLM
    if json.load(open(f"{d}/config.json")).get("model_type") == "llava":
        from transformers import LlavaForConditionalGeneration as cls
    m, info = cls.from_pretrained(d, output_loading_info=True, dtype=dtype)
    info = {k: sorted(map(str, v)) for k, v in info.items() if v}
    return {n: p.detach() for n, p in m.named_parameters()}, info, type(m).__name__


def cmp(got, want, cast=None, frozen=None):
    """frozen: the live module's tensors, for parameters the masters lack (frozen, requires_grad=False):
    compared after a cast to the loaded dtype (from_pretrained casts a stored bf16 frozen parameter)"""
    if frozen is not None:
        want = dict(want)
        for n in set(got) - set(want):
            if n in frozen:
                want[n] = frozen[n].to(got[n].dtype if cast is None else cast)
    bad = []
    for n, w in want.items():
        g = got.get(n)
        w = w if cast is None else w.to(cast)
        # bit for bit (NaN-safe): compare the raw bytes, not torch.equal
        if (g is None or g.dtype != w.dtype or g.shape != w.shape
                or not torch.equal(g.contiguous().view(torch.uint8), w.contiguous().view(torch.uint8))):
            bad.append(n if g is None else f"{n} {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}")
    extra = sorted(set(got) - set(want))
    nan = sorted(n for n, w in want.items() if w.is_floating_point() and torch.isnan(w).any())
    return {"equal": not bad and not extra, "compared": len(want), "differ": bad[:6], "extra": extra[:6],
            "params_with_nan": len(nan), "nan_examples": nan[:4]}


for name in sys.argv[1:]:
    res = {"name": name}
    bf16 = name.endswith("bf16")
    live = torch.load(f"/w/runs/{name}/live_state_step2.pt", map_location="cpu", weights_only=False)
    for mnt in (f"/zm-mnt/{name}", f"/zm-mnt/{name}-s"):
        for folder in (["global_step2_fp32", "global_step2_bf16"] if bf16 else ["global_step2_fp32"]):
            d = f"{mnt}/checkpoint-2/{folder}"
            key = f"{os.path.basename(mnt)}/{folder}"
            try:
                r = {"files": sorted(os.listdir(d))}
                dt = torch.bfloat16 if folder.endswith("bf16") else torch.float32
                got, info, cls = load(d, dt)
                r["class"], r["loading_info"] = cls, info
                if dt == torch.float32:
                    r["vs_live_fp32_masters"] = cmp(got, live["fp32"], frozen=live["module"])
                else:
                    r["vs_live_bf16_module"] = cmp(got, live["module"])
                    r["vs_live_masters_to_bf16"] = cmp(got, live["fp32"], torch.bfloat16, frozen=live["module"])
                real, rinfo, _ = load(f"/w/runs/{name}/checkpoint-2", dt)
                r["vs_trainer_model_safetensors_loaded"] = cmp(got, real)
                r["trainer_loading_info"] = rinfo
            except Exception:
                r = {"error": traceback.format_exc()[-1500:]}
            res[key] = r
    os.makedirs("/w/res", exist_ok=True)
    json.dump(res, open(f"/w/res/hfcheck_{name}.json", "w"), indent=1)
    print(json.dumps(res, indent=1))
