#!/usr/bin/env python3
"""Oracle for issue 28, run by hand in the oracle chroot (torch 2.14, gloo on CPU), never in CI:

    ./run_in_env.sh python3 /zm/tests/oracle/fsdp/fsdp_load.py FIXTURE MOUNTED_SRC WORLD OUT.json

For one fixture of ../shared/fixtures (a DeepSpeed run of oracle_common.TinyModel) mounted by
zeromount, at WORLD ranks:
  dcp    FSDP2 (fully_shard) + torch AdamW load MNT/<T>_dcp with dcp.load and set_state_dict;
  fsdp   the same from MNT/layouts/fsdp-dp<WORLD>/ (pytorch_model_fsdp_0/ and optimizer_0/, loaded
         separately as Accelerate's load_fsdp_model / load_fsdp_optimizer do);
  floor  torch itself saves the run's live state with dcp.save (a real FSDP2 DCP checkpoint), and a
         fresh job loads that.
Each job's state right after the load is compared bit for bit with the run's live state (weights,
moments, step, frozen parameter, buffer, hyper-parameters); then each takes two more steps, and
their states are compared with the floor's bit for bit. `dcp_to_torch_save` runs on each folder.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FIXTURE, SRC, WORLD, OUT = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
FIXTURES = os.environ.get("ZM_FIXTURES", "/zm/tests/fixtures")


def info():
    return json.load(open(f"{FIXTURES}/{FIXTURE}/meta/train.json"))


def live():
    return torch.load(f"{FIXTURES}/{FIXTURE}/meta/live_state.pt", weights_only=False)


def groups_of_run():
    """DeepSpeed's hyper-parameters as its own converter wrote them (ds_to_universal)."""
    tag = info()["tag"]
    osd = torch.load(f"{FIXTURES}/{FIXTURE}/ds_to_universal/{tag}_universal/zero/optimizer_state.pt",
                     weights_only=False)
    return osd["param_groups"]


def build(rank):
    import oracle_common as oc
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = oc.make_model(perturb=True)  # anything a load leaves alone stays visibly wrong
    mesh = init_device_mesh("cpu", (WORLD,))
    for m in (model.embed, model.fc1, model.fc2, model.head):
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(oc.param_groups(model, len(info()["param_group_names"])), lr=1.0, betas=(0.5, 0.5),
                            eps=1.0, weight_decay=0.5)
    return model, opt


def full_state(model, opt):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return msd, osd


def steps(model, opt, n=2):
    import oracle_common as oc
    rank = dist.get_rank()
    for s in range(n):
        tokens, labels = oc.batch(1000 + s, rank)
        loss = model(tokens, labels)
        loss.backward()
        opt.step()
        opt.zero_grad()


def compare_live(msd, osd, lv, inf, groups):
    bad = []
    for n, t in {**lv["fp32"], **lv["frozen"], **lv["buffers"]}.items():
        if not torch.equal(msd[n].float(), t.float()):
            bad.append(f"model {n}")
    for n in lv["fp32"]:
        st = osd["state"][n]
        for k in ("exp_avg", "exp_avg_sq"):
            if not torch.equal(st[k], lv[k][n]):
                bad.append(f"{k} {n}")
        if float(st["step"]) != float(inf["steps"]):
            bad.append(f"step {n}: {float(st['step'])}")
    for g, pg in enumerate(osd["param_groups"]):
        for k, v in groups[g].items():
            if k != "params" and (list(v) if isinstance(v, tuple) else v) != (list(pg[k]) if isinstance(pg[k], tuple) else pg[k]):
                bad.append(f"group {g} {k}: {pg[k]} != {v}")
        if list(pg["params"]) != inf["param_group_names"][g]:
            bad.append(f"group {g} params {pg['params']}")
    return bad


def compare(a, b):
    (ma, oa), (mb, ob) = a, b
    bad = [f"model {n}" for n in mb if not torch.equal(ma[n], mb[n])]
    for n, st in ob["state"].items():
        for k, v in st.items():
            if not torch.equal(torch.as_tensor(oa["state"][n][k]), torch.as_tensor(v)):
                bad.append(f"{k} {n}")
    return bad


def job(rank, kind, folder, floor_dir, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + WORLD))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
    lv, inf, groups = live(), info(), groups_of_run()
    model, opt = build(rank)
    msd, osd = get_state_dict(model, opt)
    if kind == "floor":  # torch's own save of the live state, then a fresh load of it
        # The FSDP2 model is fp32; a 16-bit run's frozen parameter and buffer are cast as a load's
        # copy_ casts them (gloo scatters no bf16).
        full_m = {n: t.float() for n, t in {**lv["fp32"], **lv["frozen"], **lv["buffers"]}.items()}
        full_o = {"state": {n: {"step": torch.tensor(float(inf["steps"])), "exp_avg": lv["exp_avg"][n],
                                "exp_avg_sq": lv["exp_avg_sq"][n]} for n in lv["fp32"]},
                  "param_groups": [{**{k: v for k, v in g.items() if k != "params"},
                                    "params": inf["param_group_names"][i]} for i, g in enumerate(groups)]}
        set_state_dict(model, opt, model_state_dict=full_m, optim_state_dict=full_o,
                       options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False))
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=floor_dir)
        dist.barrier()
        model, opt = build(rank)
        msd, osd = get_state_dict(model, opt)
        dcp.load({"model": msd, "optimizer": osd}, storage_reader=FileSystemReader(floor_dir))
    elif kind == "dcp":
        dcp.load({"model": msd, "optimizer": osd}, storage_reader=FileSystemReader(folder))
    else:  # Accelerate's load_fsdp_model and load_fsdp_optimizer: one folder each
        dcp.load({"model": msd}, storage_reader=FileSystemReader(f"{folder}/pytorch_model_fsdp_0"))
        dcp.load({"optimizer": osd}, storage_reader=FileSystemReader(f"{folder}/optimizer_0"))
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    at_load = full_state(model, opt)
    bad = compare_live(*at_load, lv, inf, groups) if rank == 0 else []
    steps(model, opt)
    after = full_state(model, opt)
    if rank == 0:
        torch.save({"bad_at_load": bad, "after": after}, result)
    dist.destroy_process_group()


def main():
    inf = info()
    tag = inf["tag"]
    tmp = tempfile.mkdtemp()
    out = {"fixture": FIXTURE, "world": WORLD}
    runs = {}
    for kind, folder in [("floor", None), ("dcp", f"{SRC}/{tag}_dcp"), ("fsdp", f"{SRC}/layouts/fsdp-dp{WORLD}")]:
        result = f"{tmp}/{kind}.pt"
        mp.spawn(job, args=(kind, folder, f"{tmp}/floor", result), nprocs=WORLD)
        runs[kind] = torch.load(result, weights_only=False)
        out[f"{kind}_at_load_vs_live"] = runs[kind]["bad_at_load"] or "bit-equal"
    for kind in ("dcp", "fsdp"):
        bad = compare(runs[kind]["after"], runs["floor"]["after"])
        out[f"{kind}_after_2_steps_vs_floor"] = bad or "bit-equal"
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    converted = {}
    for name, folder in [("dcp", f"{SRC}/{tag}_dcp"), ("fsdp_model", f"{SRC}/layouts/fsdp-dp{WORLD}/pytorch_model_fsdp_0"),
                         ("fsdp_optimizer", f"{SRC}/layouts/fsdp-dp{WORLD}/optimizer_0")]:
        try:
            dcp_to_torch_save(folder, f"{tmp}/{name}.pt")
            sd = torch.load(f"{tmp}/{name}.pt", weights_only=False)
            converted[name] = f"ok ({len(sd)} top-level keys)"
        except Exception as e:  # noqa: BLE001
            converted[name] = f"failed: {e}"
    out["dcp_to_torch_save"] = converted
    shutil.rmtree(tmp, ignore_errors=True)
    json.dump(out, open(OUT, "w"), indent=1, default=str)
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
