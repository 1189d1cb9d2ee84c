#!/usr/bin/env python3
"""Issue 28 oracle, by hand in the HF chroot (shared/oracle/hf), never in CI: the plain Hugging Face
Trainer (no DeepSpeed, no FSDP, one CPU process) resumes from MNT/checkpoint-N/layouts/torch of a
DeepSpeed Trainer run, and the state it holds when its first resumed step begins (weights, Adam
moments and step, learning rate, global step) is compared bit for bit with the DeepSpeed run's
live state at that save (live_state_step<N>.pt, gathered by the run itself).

    ./run_in_env.sh python3 /hf/plain_resume.py --model gpt2 --resume /zm-mnt/gpt2_z2/checkpoint-2/layouts/torch \
        --live /zm/tests/fixtures/hf/gpt2_z2/meta/live_state_step2.pt --result /w/res/plain_gpt2_z2.json
"""
import argparse
import json
import os
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=["llama", "gpt2"], required=True)
ap.add_argument("--resume", required=True)
ap.add_argument("--live", required=True)
ap.add_argument("--result", required=True)
a = ap.parse_args()
sys.path.insert(0, "/hf")
from transformers import (AutoModelForCausalLM, GPT2Config, LlamaConfig, Trainer, TrainerCallback,  # noqa: E402
                          TrainingArguments, set_seed)
from train_data import RandomTokens  # noqa: E402


class Grab(TrainerCallback):
    """The state when the first resumed step begins, before any update."""

    def __init__(self):
        self.state = None

    def on_step_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kw):
        if self.state is not None:
            return
        opt = optimizer.optimizer if hasattr(optimizer, "optimizer") else optimizer
        names = {p: n for n, p in model.named_parameters()}
        st = {"fp32": {}, "exp_avg": {}, "exp_avg_sq": {}, "step": {}}
        for n, p in model.named_parameters():
            if p.requires_grad:
                st["fp32"][n] = p.detach().clone()
        for group in opt.param_groups:
            for p in group["params"]:
                s = opt.state.get(p, {})
                for k in ("exp_avg", "exp_avg_sq", "step"):
                    if k in s:
                        st[k][names[p]] = torch.as_tensor(s[k]).clone()
        st["lr"] = [g["lr"] for g in opt.param_groups]
        st["global_step"] = state.global_step
        self.state = st


def main():
    args = TrainingArguments(output_dir="/w/runs/plain_" + a.model, per_device_train_batch_size=2,
                             gradient_accumulation_steps=1, max_steps=4, learning_rate=5e-3, weight_decay=0.01,
                             warmup_steps=1, lr_scheduler_type="linear", max_grad_norm=1.0, logging_steps=1,
                             save_strategy="no", seed=42, report_to="none", disable_tqdm=True,
                             dataloader_num_workers=0, use_cpu=True)
    set_seed(42)
    if a.model == "llama":
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=256, max_position_embeddings=64, tie_word_embeddings=False)
    else:
        cfg = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_config(cfg)
    grab = Grab()
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(), callbacks=[grab])
    trainer.train(resume_from_checkpoint=a.resume)
    live = torch.load(a.live, weights_only=False)
    got = grab.state
    bad = []
    for k in ("fp32", "exp_avg", "exp_avg_sq"):
        for n, t in live[k].items():
            if t is None:
                continue
            if n not in got[k] or not torch.equal(got[k][n], t.float()):
                bad.append(f"{k} {n}")
    steps = {float(v) for v in got["step"].values()}
    out = {"resume": a.resume, "params": len(got["fp32"]), "differ": bad or "bit-equal",
           "lr": got["lr"], "live_lr": live.get("lr"), "lr_equal": got["lr"] == live.get("lr"),
           "global_step": got["global_step"], "live_global_steps": live.get("global_steps"), "optimizer_steps": sorted(steps)}
    os.makedirs(os.path.dirname(a.result), exist_ok=True)
    json.dump(out, open(a.result, "w"), indent=1, default=str)
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
