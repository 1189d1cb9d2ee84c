#!/usr/bin/env python3
"""Issue 41: a tiny transformers LlamaForCausalLM (config from AutoConfig, nothing from the Hub) trained with
plain torch FSDP2 (fully_shard per decoder layer, then the root), CPU + gloo, AdamW, --steps steps, then saved
with torch.distributed.checkpoint in two styles:

  OUT/fsdp2/step-N/                       dcp.save({"model": ..., "optimizer": ...}) of get_state_dict(model, opt)
  OUT/fsdp2/config.json                   model.config.save_pretrained(OUT/fsdp2): the run folder, beside the tags
  OUT/trainer/checkpoint-N/pytorch_model_fsdp_0/   accelerate save_fsdp_model (fsdp_version 2, SHARDED_STATE_DICT)
  OUT/trainer/checkpoint-N/optimizer_0/            accelerate save_fsdp_optimizer
  OUT/trainer/checkpoint-N/config.json, trainer_state.json   as the Trainer writes them into checkpoint-N
  OUT/live_model.pt                        the full model state dict at step N (get_model_state_dict full_state_dict)

Run inside the HF chroot (../shared/oracle/hf/run_in_env.sh): python3 train_fsdp2_llama.py --out DIR [--world 2]
"""
import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SEQ, MB, VOCAB = 16, 2, 256


def make_config():
    from transformers import AutoConfig
    return AutoConfig.for_model("llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                max_position_embeddings=64, tie_word_embeddings=False)


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, VOCAB, (MB, SEQ), generator=g)


def worker(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    try:
        from transformers import AutoModelForCausalLM
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict, get_model_state_dict,
                                                             get_optimizer_state_dict)
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
        torch.manual_seed(1234)
        cfg = make_config()
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
        mesh = init_device_mesh("cpu", (a.world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        nodecay = [p for n, p in model.named_parameters() if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
        losses = []
        for s in range(a.steps):
            ids = batch(s, rank)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            os.makedirs(a.out, exist_ok=True)
            torch.save({k: v.clone() for k, v in full.items()}, os.path.join(a.out, "live_model.pt"))
        dist.barrier()
        # style fsdp2: the DCP tutorials' {"model", "optimizer"} of get_state_dict
        run = os.path.join(a.out, "fsdp2")
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=os.path.join(run, f"step-{a.steps}"))
        # style Trainer / Accelerate (accelerate.utils.fsdp_utils save_fsdp_model / save_fsdp_optimizer, FSDP2)
        ck = os.path.join(a.out, "trainer", f"checkpoint-{a.steps}")
        o = StateDictOptions(full_state_dict=False, cpu_offload=True, broadcast_from_rank0=False)
        mdir, odir = os.path.join(ck, "pytorch_model_fsdp_0"), os.path.join(ck, "optimizer_0")
        os.makedirs(mdir, exist_ok=True)
        os.makedirs(odir, exist_ok=True)
        dcp.save(state_dict={"model": get_model_state_dict(model, options=o)},
                 storage_writer=dcp.FileSystemWriter(mdir), planner=DefaultSavePlanner())
        dcp.save(state_dict={"optimizer": get_optimizer_state_dict(model, opt, options=o)},
                 storage_writer=dcp.FileSystemWriter(odir), planner=DefaultSavePlanner())
        if rank == 0:
            cfg.architectures = ["LlamaForCausalLM"]
            cfg.save_pretrained(run)   # a FSDP2 user's run folder: config.json beside step-N/
            cfg.save_pretrained(ck)    # the Trainer: config.json inside checkpoint-N/
            with open(os.path.join(ck, "trainer_state.json"), "w") as f:
                json.dump({"global_step": a.steps, "log_history": [{"loss": l, "step": i + 1} for i, l in enumerate(losses)],
                           "_note": "written by train_fsdp2_llama.py in the shape of TrainerState (subset)"}, f, indent=2)
            print("losses rank0", losses)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
