"""The Hugging Face Trainer's output_dir mounted as it is (fixtures/hf: real Trainer runs of
transformers 5.12.1 driving DeepSpeed 0.19.6): every checkpoint-N/ below it is a checkpoint folder
with SRC's made-up entries; a faked layout is a whole checkpoint folder the Trainer can resume
from; the weights folders hold what from_pretrained reads, sharded as zero_to_fp32.py
--safe_serialization shards them. Compared with the real files, the run's live state and
DeepSpeed's own zero_to_fp32.py output, never with the mount itself."""
import errno
import json
import os
import shutil
import subprocess
import time

import pytest
import torch

from conftest import FIXTURES, ZEROMOUNT, mount
from test_browse import as_torch, read_safetensors

HF = os.path.join(FIXTURES, "hf")
RUN = os.path.join(HF, "gpt2_z2", "run")  # checkpoint-2/ and checkpoint-4/: ZeRO-2, fp32, tied lm_head/wte


def live(run):
    return torch.load(os.path.join(HF, run, "meta", "live_state_step2.pt"), weights_only=False)


def listdir_until(path, name, seconds=5.0):
    deadline = time.monotonic() + seconds
    while name not in os.listdir(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    return name in os.listdir(path)


def test_the_output_dir_shows_a_checkpoint_folder_per_checkpoint():
    with mount(RUN) as m:
        assert sorted(os.listdir(m)) == [".zeromount", "checkpoint-2", "checkpoint-4", "report.html"]  # a run folder
        for n in (2, 4):
            ck = f"{m}/checkpoint-{n}"
            made = {f"global_step{n}_universal", f"global_step{n}_params", f"global_step{n}_fp32", f"global_step{n}_dcp", "latest_universal",
                    "layouts", "report.html"}
            real = set(os.listdir(os.path.join(RUN, f"checkpoint-{n}")))
            assert set(os.listdir(ck)) == real | made
            assert open(f"{ck}/latest_universal").read() == f"global_step{n}_universal"
            w = torch.load(f"{ck}/global_step{n}_universal/zero/transformer.wte.weight/fp32.pt", weights_only=True)
            if n == 2:
                assert torch.equal(w["param"], live("gpt2_z2")["fp32"]["transformer.wte.weight"])
        stats = open(f"{m}/.zeromount/stats").read()
        assert "tags_served 2\n" in stats


def test_a_nested_experiments_folder(tmp_path):
    src = tmp_path / "experiments"
    shutil.copytree(RUN, src / "team" / "gpt2", symlinks=True)
    shutil.copytree(os.path.join(HF, "llama_z3", "run"), src / "team" / "llama", symlinks=True)
    with mount(str(src)) as m:
        assert sorted(os.listdir(m)) == [".zeromount", "team"]
        u = f"{m}/team/llama/checkpoint-2/global_step2_universal/zero/model.embed_tokens.weight/exp_avg.pt"
        want = live("llama_z3")["exp_avg"]["model.embed_tokens.weight"]
        assert torch.equal(torch.load(u, weights_only=True)["param"], want)
        assert "global_step2" in os.listdir(f"{m}/team/gpt2/checkpoint-2/layouts/zero1-dp1-fp32")


def test_a_faked_layout_holds_the_run_files_byte_for_byte():
    with mount(RUN) as m:
        for target in ("zero3-dp4-fp32", "zero1-dp1-fp32"):
            t = f"{m}/checkpoint-2/layouts/{target}"
            real = os.path.join(RUN, "checkpoint-2")
            want = {e for e in os.listdir(real) if os.path.isfile(os.path.join(real, e))}
            assert set(os.listdir(t)) == want | {"global_step2"}
            for f in want:
                assert open(f"{t}/{f}", "rb").read() == open(os.path.join(real, f), "rb").read(), f
            # The Trainer's own files load as they do from the real folder.
            state = json.load(open(f"{t}/trainer_state.json"))
            assert state["global_step"] == 2
            assert torch.load(f"{t}/scheduler.pt", weights_only=False) == torch.load(f"{real}/scheduler.pt",
                                                                                      weights_only=False)


def test_weights_folders_hold_config_and_the_live_masters():
    with mount(RUN) as m:
        d = f"{m}/checkpoint-2/global_step2_fp32"
        assert sorted(os.listdir(d)) == ["config.json", "generation_config.json", "model.safetensors"]
        for f in ("config.json", "generation_config.json"):
            assert open(f"{d}/{f}", "rb").read() == open(os.path.join(RUN, "checkpoint-2", f), "rb").read()
        st = read_safetensors(f"{d}/model.safetensors")
        masters = live("gpt2_z2")["fp32"]
        for name, want in masters.items():
            assert torch.equal(as_torch(st[name], torch.float32), want), name
        # A tie keeps both names, as the Trainer's own model.safetensors does (from_pretrained ties them).
        assert "lm_head.weight" in read_safetensors(os.path.join(RUN, "checkpoint-2", "model.safetensors"))
        assert torch.equal(as_torch(st["lm_head.weight"], torch.float32), masters["transformer.wte.weight"])


def test_a_tokenizer_copied_in_after_the_listing_joins_the_weights_folders(tmp_path):
    """Users copy tokenizer and config files into a checkpoint folder after the save: the weights
    folders (what from_pretrained reads) show them once the checkpoint folder has seen them."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    with mount(str(run), "-o", "rescan=0.2") as m:
        d = f"{m}/checkpoint-2/global_step2_fp32"
        assert "tokenizer_config.json" not in os.listdir(d)
        (run / "checkpoint-2" / "tokenizer_config.json").write_text('{"model_max_length": 1024}')
        assert listdir_until(f"{m}/checkpoint-2", "tokenizer_config.json"), "the checkpoint folder shows it"
        assert "tokenizer_config.json" in os.listdir(d)
        assert open(f"{d}/tokenizer_config.json").read() == '{"model_max_length": 1024}'
        assert "tokenizer_config.json" in os.listdir(f"{m}/checkpoint-2/global_step2_fp32")
        assert "model.safetensors" in os.listdir(d)


def test_a_bf16_run_has_weights_in_its_training_precision():
    run = os.path.join(HF, "llama_z2_bf16", "run")
    with mount(run) as m:
        ck = f"{m}/checkpoint-2"
        assert {"global_step2_fp32", "global_step2_bf16"} <= set(os.listdir(ck))
        st = read_safetensors(f"{ck}/global_step2_bf16/model.safetensors")
        for name, want in live("llama_z2_bf16")["module"].items():
            assert torch.equal(as_torch(st[name], torch.bfloat16), want), name
        assert "config.json" in os.listdir(f"{ck}/global_step2_bf16")


def test_shards_and_index_equal_zero_to_fp32_safe_serialization():
    """DeepSpeed's own zero_to_fp32.py --safe_serialization --max_shard_size 200KB output is kept in
    fixtures/hf/llama_z3/zero_to_fp32_200KB: the index byte for byte, every shard tensor for tensor."""
    ref = os.path.join(HF, "llama_z3", "zero_to_fp32_200KB")
    with mount(os.path.join(HF, "llama_z3", "run"), "-o", "max_shard_size=200KB") as m:
        d = f"{m}/checkpoint-2/global_step2_fp32"
        names = sorted(os.listdir(d))
        assert names == sorted(["config.json", "generation_config.json"] + os.listdir(ref))
        assert open(f"{d}/model.safetensors.index.json", "rb").read() == \
            open(f"{ref}/model.safetensors.index.json", "rb").read()
        index = json.load(open(f"{d}/model.safetensors.index.json"))
        total = 0
        for shard in sorted(set(index["weight_map"].values())):
            ours, theirs = read_safetensors(f"{d}/{shard}"), read_safetensors(f"{ref}/{shard}")
            assert ours.keys() == theirs.keys(), shard
            assert all((ours[k] == theirs[k]).all() for k in ours), shard
            assert {k for k, v in index["weight_map"].items() if v == shard} == set(ours), shard
            assert os.path.getsize(f"{d}/{shard}") <= 200_000 + 4096
            total += sum(a.nbytes for a in ours.values())
        assert index["metadata"]["total_size"] == total


def test_sharding_keeps_a_tie_in_one_shard_and_counts_it_once():
    with mount(RUN, "-o", "max_shard_size=100KB") as m:
        d = f"{m}/checkpoint-2/global_step2_fp32"
        index = json.load(open(f"{d}/model.safetensors.index.json"))
        wm = index["weight_map"]
        assert wm["lm_head.weight"] == wm["transformer.wte.weight"]
        sizes = {}
        for shard in set(wm.values()):
            for k, a in read_safetensors(f"{d}/{shard}").items():
                sizes[k] = a.nbytes
        assert index["metadata"]["total_size"] == sum(sizes.values()) - sizes["lm_head.weight"]


def test_a_bad_shard_size_is_refused():
    with mount(RUN, "-o", "max_shard_size=5XB", expect_fail=True) as r:
        assert "-o max_shard_size: '5XB' is not a size" in r.stderr and r.returncode == 2, r.stderr


def test_checkpoints_saved_and_deleted_while_mounted(tmp_path):
    """save_steps adds checkpoint-N/, save_total_limit deletes the oldest one."""
    src = tmp_path / "run"
    os.makedirs(src)
    shutil.copytree(os.path.join(RUN, "checkpoint-2"), src / "checkpoint-2", symlinks=True)
    with mount(str(src)) as m:
        assert "global_step2_universal" in os.listdir(f"{m}/checkpoint-2")
        kept = f"{m}/checkpoint-2/global_step2_universal/zero/transformer.wte.weight/fp32.pt"
        os.stat(kept)
        shutil.copytree(os.path.join(RUN, "checkpoint-4"), src / "checkpoint-4", symlinks=True)
        assert listdir_until(m, "checkpoint-4")
        assert "global_step4_universal" in os.listdir(f"{m}/checkpoint-4")
        shutil.rmtree(src / "checkpoint-2")
        deadline = time.monotonic() + 5
        while "tags_deleted 1" not in open(f"{m}/.zeromount/stats").read() and time.monotonic() < deadline:
            os.listdir(m)
            time.sleep(0.2)
        stats = open(f"{m}/.zeromount/stats").read()
        assert "tags_deleted 1\n" in stats and "tags_served 1\n" in stats, stats
        # Counted, not a line of errors (issue 27, item 7); the checkpoint saved into the run counts too.
        assert "checkpoint-2/global_step2" not in open(f"{m}/.zeromount/errors").read()
        assert "tags_after_mount 1\n" in stats, stats
        with pytest.raises(OSError) as e:
            open(kept, "rb").read()
        assert e.value.errno == errno.ESTALE
        w = torch.load(f"{m}/checkpoint-4/global_step4_universal/zero/transformer.wte.weight/fp32.pt", weights_only=True)
        assert w["param"].shape == (256, 64)


def test_export_writes_every_checkpoint_folder_of_the_output_dir(tmp_path):
    r = subprocess.run([ZEROMOUNT, "export", RUN, str(tmp_path / "out"), "--view", "fp32"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    for n in (2, 4):
        d = tmp_path / "out" / f"checkpoint-{n}" / f"global_step{n}_fp32"
        assert sorted(os.listdir(d)) == ["config.json", "generation_config.json", "model.safetensors"]
    st = read_safetensors(tmp_path / "out" / "checkpoint-2" / "global_step2_fp32" / "model.safetensors")
    for name, want in live("gpt2_z2")["fp32"].items():
        assert torch.equal(as_torch(st[name], torch.float32), want), name
