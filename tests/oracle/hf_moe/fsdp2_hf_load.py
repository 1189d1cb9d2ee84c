"""One rank (launch.py --nproc 2): the transformers 5 model (from the weights folder's config.json), FSDP2
fully_shard per decoder layer + root on CPU/gloo, torch AdamW with the Trainer's two groups; dcp.load of the mount's
<T>_dcp (run-time names) into get_state_dict(model, optimizer); compare full params and Adam moments with the live
state. Usage: fsdp2_hf_load.py NAME  -> /w/res/fsdp2_<NAME>.json"""
import json, os, sys, traceback
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict, StateDictOptions
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

name = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
ck = f"/zm-mnt/{name}/checkpoint-2"
res = {"name": name, "world": dist.get_world_size()}
try:
    cfg = AutoConfig.from_pretrained(f"{ck}/global_step2_fp32")
    if cfg.model_type == "llava":
        from transformers import LlavaForConditionalGeneration
        model = LlavaForConditionalGeneration._from_config(cfg, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    for mn, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and mn.endswith("layers"):
            for layer in mod:
                fully_shard(layer)
    fully_shard(model)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and p.requires_grad]
    nodecay = [p for n, p in model.named_parameters() if p.ndim < 2 and p.requires_grad]
    groups = [g for g in ({"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}) if g["params"]]
    opt = torch.optim.AdamW(groups, lr=5e-3)   # the Trainer drops an empty group
    msd, osd = get_state_dict(model, opt)
    res["model_keys"] = len(msd)
    dcp.load({"model": msd, "optimizer": osd}, storage_reader=FileSystemReader(f"{ck}/global_step2_dcp"))
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    fm, fo = get_state_dict(model, opt, options=full)
    if rank == 0:
        live = torch.load(f"/w/runs/{name}/live_state_step2.pt", map_location="cpu", weights_only=False)
        bits = lambda a, b: a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
        res["params_equal_live_fp32"] = all(bits(fm[n], w) for n, w in live["fp32"].items())
        res["params_differ"] = [n for n, w in live["fp32"].items() if not bits(fm[n], w)][:6]
        st = fo["state"]
        res["exp_avg_equal"] = all(bits(st[n]["exp_avg"], live["exp_avg"][n]) for n in live["exp_avg"] if live["exp_avg"][n] is not None)
        res["exp_avg_sq_equal"] = all(bits(st[n]["exp_avg_sq"], live["exp_avg_sq"][n]) for n in live["exp_avg_sq"] if live["exp_avg_sq"][n] is not None)
        res["step"] = sorted({float(st[n]["step"]) for n in st})
        res["example_keys"] = sorted(fm)[:3] + [k for k in sorted(fm) if "experts" in k][:2]
except Exception:
    res["error"] = traceback.format_exc()[-2000:]
if rank == 0:
    json.dump(res, open(f"/w/res/fsdp2_{name}.json", "w"), indent=1)
    print(json.dumps(res, indent=1))
dist.barrier() if "error" not in res else None
dist.destroy_process_group()
