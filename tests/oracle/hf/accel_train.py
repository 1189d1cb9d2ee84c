"""One rank of a small Accelerate run driving DeepSpeed ZeRO on CPU (launched by /hf/launch.py; cell 4).

  save:   accel_train.py --stage 2 --out /w/o23/accel/z2 --result R.json
          4 steps; accelerator.save_state() after step 2 -> <out>/checkpoints/checkpoint_0/
          (pytorch_model/ = the DeepSpeed tag, latest, scheduler.bin, random_states_<rank>.pkl)
  resume: accel_train.py --stage S --out DIR --resume PATH [--load-universal] --result R.json
          accelerator.load_state(PATH), skip the 2 batches already trained, steps 3-4
Writes R.json (per-rank losses with each batch's first token and token sum; .rankN.json for rank N) and
<out>/final_state.pt (rank 0): full fp32 masters, exp_avg, exp_avg_sq, module weights, flat fp32 partitions;
the same as <out>/live_state_step2.pt right after save_state (save) or <out>/loaded_state.pt right after
load_state (resume).
Llama (hidden 64, 2 layers, vocab 256) from a config; AdamW lr 5e-3, wd 0.01 on all params; linear
schedule, 1 warmup step; clipping 1.0; micro batch 2 per rank; SequentialSampler over RandomTokens."""
import argparse
import json
import os
import sys
import traceback

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--stage", type=int, default=2)
ap.add_argument("--out", required=True)
ap.add_argument("--resume", default=None)
ap.add_argument("--load-universal", action="store_true")
ap.add_argument("--result", required=True)
a = ap.parse_args()

os.environ.setdefault("ACCELERATE_USE_DEEPSPEED", "true")   # what `accelerate launch --use_deepspeed` sets
import hf_cpu_patch  # noqa: F401,E402  (/hf: the CPU backend for accelerate + DeepSpeed)
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import DeepSpeedPlugin, ProjectConfiguration, set_seed  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, get_linear_schedule_with_warmup  # noqa: E402

from train_data import RandomTokens  # noqa: E402

RANK = int(os.environ.get("RANK", 0))
ds_cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
          "zero_optimization": {"stage": a.stage}, "bf16": {"enabled": False}, "steps_per_print": 1000,
          "zero_allow_untested_optimizer": True}
if a.load_universal:
    ds_cfg["checkpoint"] = {"load_universal": True}
acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=ds_cfg),
                  project_config=ProjectConfiguration(project_dir=a.out, automatic_checkpoint_naming=True))
set_seed(42)
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=64, tie_word_embeddings=False)
model = AutoModelForCausalLM.from_config(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)
sched = get_linear_schedule_with_warmup(opt, 1, 4)
dl = torch.utils.data.DataLoader(RandomTokens(), batch_size=2, shuffle=False)
model, opt, dl, sched = acc.prepare(model, opt, dl, sched)


def full_state(engine):
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state
    import deepspeed
    st = {"fp32": {}, "exp_avg": {}, "exp_avg_sq": {}}
    if a.stage < 3 and hasattr(engine.optimizer, "_lazy_init_hp_params_optimizer_state"):
        engine.optimizer._hp_optimizer_states_linked = False   # DeepSpeed's idempotent lazy link, as train.py does
        engine.optimizer._lazy_init_hp_params_optimizer_state()
    for n, p in engine.module.named_parameters():
        st["fp32"][n] = safe_get_full_fp32_param(p).detach().clone()
        for k in ("exp_avg", "exp_avg_sq"):
            v = safe_get_full_optimizer_state(p, k)
            st[k][n] = None if v is None else v.detach().clone()
    params = list(engine.module.parameters())
    if a.stage == 3:
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            st["module"] = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    else:
        st["module"] = {n: p.detach().clone() for n, p in engine.module.named_parameters()}
    if hasattr(engine.optimizer, "single_partition_of_fp32_groups"):
        st["flat_fp32"] = [t.detach().clone() for t in engine.optimizer.single_partition_of_fp32_groups]
    names = {id(p): n for n, p in engine.module.named_parameters()}
    groups = getattr(engine.optimizer, "bit16_groups", None) or getattr(engine.optimizer, "fp16_groups", None)
    st["group_names"] = [[names.get(id(p), "?") for p in g] for g in groups] if groups else None
    st["param_groups"] = [{k: v for k, v in g.items() if k != "params"} for g in engine.optimizer.param_groups]
    st["global_steps"] = engine.global_steps
    st["lr"] = [g["lr"] for g in engine.optimizer.param_groups]
    return st


losses, err = [], None
try:
    start = 0
    it = dl
    if a.resume:
        acc.load_state(a.resume)
        start = 2
        it = acc.skip_first_batches(dl, start)
        st = full_state(model)   # the state as loaded, before step 3
        if RANK == 0:
            torch.save(st, os.path.join(a.out, "loaded_state.pt"))
    model.train()
    step = start
    for batch in it:
        out = model(input_ids=batch["input_ids"], labels=batch["labels"])
        losses.append([step, float(out.loss.detach().item()), int(batch["input_ids"][0, 0]), int(batch["input_ids"].sum())])
        acc.backward(out.loss)
        opt.step()
        sched.step()
        opt.zero_grad()
        step += 1
        if step == 2 and not a.resume:
            acc.save_state()
            st = full_state(model)   # the live state that was saved
            if RANK == 0:
                torch.save(st, os.path.join(a.out, "live_state_step2.pt"))
        if step == 4:
            break
    st = full_state(model)
    if RANK == 0:
        torch.save(st, os.path.join(a.out, "final_state.pt"))
except Exception:
    err = traceback.format_exc()
os.makedirs(os.path.dirname(a.result), exist_ok=True)
with open(a.result if RANK == 0 else a.result.replace(".json", f".rank{RANK}.json"), "w") as f:
    json.dump({"rank": RANK, "argv": sys.argv, "losses": losses, "error": err, "resume": a.resume,
               "world_size": acc.num_processes, "lr": sched.get_last_lr()}, f, indent=1)
if err:
    print(err, file=sys.stderr)
    sys.exit(1)
