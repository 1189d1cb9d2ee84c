"""/hf/train.py, unchanged, plus one record: when training begins (after trainer.train(resume_from_checkpoint=...)
has loaded the checkpoint, before the first step) rank 0 saves <out>/loaded_state.pt: train.py's own full_state()
(fp32 masters, exp_avg, exp_avg_sq, module weights, flat fp32 partitions, param_groups) and, per optimizer group,
the names of its parameters in partition order. Same arguments as train.py."""
import importlib.util
import os
import sys

import torch

sys.argv = ["/hf/train.py"] + sys.argv[1:]
spec = importlib.util.spec_from_file_location("train", "/hf/train.py")
train = importlib.util.module_from_spec(spec)
sys.modules["train"] = train
spec.loader.exec_module(train)   # argparse, imports, classes; main() runs below


def group_names(engine):
    names = {id(p): n for n, p in engine.module.named_parameters()}
    opt = engine.optimizer
    groups = getattr(opt, "bit16_groups", None) or getattr(opt, "fp16_groups", None)
    if groups is None:
        return None
    return [[names.get(id(p), "?") for p in g] for g in groups]


def on_train_begin(self, args, state, control, **kw):
    engine = self.trainer.model_wrapped
    st = train.full_state(engine)
    st["group_names"] = group_names(engine)
    if train.RANK == 0:
        torch.save(st, os.path.join(args.output_dir, "loaded_state.pt"))


train.Rec.on_train_begin = on_train_begin
train.main()
