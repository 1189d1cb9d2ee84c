"""Real mounts of every fixture (issue 4): the made-up universal folder loads in torch exactly as
DeepSpeed's own ds_to_universal.py output does, under both model-state name families, and the
real files stay byte-identical and unwritable."""
import errno
import hashlib
import os
import struct
import zipfile
import random

import numpy as np
import pytest
import torch

from conftest import FIXTURES, run_in_threads

TAG = "global_step3"


def ref_dir(name):
    return os.path.join(FIXTURES, name, "ds_to_universal", f"{TAG}_universal")


def tensor_of(obj):
    return obj["param"] if isinstance(obj, dict) else obj


def test_universal_file_list(mnt):
    name, m = mnt
    ref = ref_dir(name)
    assert sorted(os.listdir(f"{m}/{TAG}_universal/zero")) == sorted(os.listdir(f"{ref}/zero"))
    for p in os.listdir(f"{ref}/zero"):
        if os.path.isdir(f"{ref}/zero/{p}"):
            want = set(os.listdir(f"{ref}/zero/{p}")) | {"step.pt"}
            assert set(os.listdir(f"{m}/{TAG}_universal/zero/{p}")) == want


@pytest.mark.parametrize("weights_only", [True, False])
def test_tensors_equal_ds_to_universal(mnt, weights_only):
    name, m = mnt
    ref = ref_dir(name)
    checked = 0
    for p in os.listdir(f"{ref}/zero"):
        if not os.path.isdir(f"{ref}/zero/{p}"):
            continue
        for f in os.listdir(f"{ref}/zero/{p}"):
            ours = torch.load(f"{m}/{TAG}_universal/zero/{p}/{f}", weights_only=weights_only)
            theirs = torch.load(f"{ref}/zero/{p}/{f}", weights_only=weights_only)
            if f != "step.pt":
                assert isinstance(ours, dict) and ours["cat_dim"] == 0 and list(ours) == ["cat_dim", "param"]
            a, b = tensor_of(ours), tensor_of(theirs)
            assert a.dtype == b.dtype
            assert torch.equal(a.reshape(-1), b.reshape(-1)), f"{p}/{f}"
            if isinstance(theirs, dict):
                assert a.shape == b.shape
            checked += 1
    assert checked >= 27


def test_step_files(mnt):
    name, m = mnt
    for p in os.listdir(f"{m}/{TAG}_universal/zero"):
        if os.path.isdir(f"{m}/{TAG}_universal/zero/{p}"):
            step = torch.load(f"{m}/{TAG}_universal/zero/{p}/step.pt", weights_only=True)
            assert isinstance(step, torch.Tensor) and step.dim() == 0 and step.item() == 3.0


def test_optimizer_state_serves_every_target_stage(mnt):
    name, m = mnt
    osd = torch.load(f"{m}/{TAG}_universal/zero/optimizer_state.pt", weights_only=False)
    # ZeRO-1/2 and BF16 targets (spec §6.6): ds_version and top-level param_groups.
    assert osd["ds_version"]
    assert len(osd["param_groups"]) == 2
    assert [g["weight_decay"] for g in osd["param_groups"]] == [0.01, 0.0]
    # ZeRO-3 targets: optimizer_state_dict.state[0].step and .param_groups[0].
    assert osd["optimizer_state_dict"]["state"][0]["step"].item() == 3.0
    assert osd["optimizer_state_dict"]["param_groups"][0]["lr"] == osd["param_groups"][0]["lr"]
    # Every key DeepSpeed's converter writes, with its value: the loss scaler (none for
    # BF16_Optimizer sources, static for bf16, dynamic with all its fields for fp16), flags, paddings.
    theirs = torch.load(f"{ref_dir(name)}/zero/optimizer_state.pt", weights_only=False)
    for k, v in theirs.items():
        if k in FLAT_TENSORS:
            continue
        assert k in osd, k
        if k != "optimizer_state_dict":
            assert plain(osd[k]) == plain(v), k
    assert ("loss_scaler" in osd) == (not name.startswith("z1_ws2_bf16")), "BF16_Optimizer files have no scaler"
    assert "fp32_flat_groups" not in osd and "base_optimizer_state" not in osd


# The converter copies the source's flat partitions into optimizer_state.pt; no loader reads them
# there (every state comes from zero/<param>/), so the view leaves them out: it would cost one more
# copy of the optimizer state per read.
FLAT_TENSORS = {"fp32_flat_groups", "base_optimizer_state", "single_partition_of_fp32_groups"}


def plain(v):
    """A pickled value as comparable data: objects (loss scalers, enums) by their class and state."""
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, torch.Tensor):
        return (str(v.dtype), v.tolist())
    if hasattr(v, "__dict__"):
        return (type(v).__name__, plain(vars(v)))
    return v


def test_model_states_under_both_names(mnt):
    name, m = mnt
    u = f"{m}/{TAG}_universal"
    names = sorted(f for f in os.listdir(u) if f.endswith("_model_states.pt"))
    assert names == ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt",
                     "zero_pp_rank_1_mp_rank_00_model_states.pt"]
    for f in names:
        sd = torch.load(f"{u}/{f}", map_location="cpu", weights_only=False)
        assert sd["dp_world_size"] == 2 and sd["mp_world_size"] == 1 and sd["global_steps"] == 3
    with open(f"{m}/latest_universal") as fh:
        assert fh.read() == f"{TAG}_universal"


def test_real_files_are_byte_identical(mnt):
    name, m = mnt
    src = os.path.join(FIXTURES, name, "checkpoint")
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        assert sorted(os.listdir(os.path.join(m, rel))) == sorted(os.listdir(dirpath)) or rel == "."
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as a, open(os.path.join(m, rel, f), "rb") as b:
                assert a.read() == b.read(), f
    made_up = {f"{TAG}_universal", f"{TAG}_params", f"{TAG}_fp32", f"{TAG}_dcp", "latest_universal", "layouts", ".zeromount",
               "report.html"}
    training = {"bf16": f"{TAG}_bf16", "fp16": f"{TAG}_fp16"}.get(name.split("_")[2])
    assert set(os.listdir(m)) == set(os.listdir(src)) | made_up | ({training} if training else set())


def all_files(m):
    """Every file but .zeromount/stats, whose counters change with every read by design."""
    for dirpath, _, files in os.walk(m):
        for f in files:
            if not (f == "stats" and dirpath.endswith("/.zeromount")):
                yield os.path.join(dirpath, f)


def test_sizes_equal_bytes_read(mnt):
    _, m = mnt
    n = 0
    for p in all_files(m):
        with open(p, "rb") as fh:
            assert os.stat(p).st_size == len(fh.read()), p
        n += 1
    assert n > 40


def test_random_chunks_equal_whole_reads(mnt):
    _, m = mnt
    rng = random.Random(11)
    for p in all_files(m):
        with open(p, "rb") as fh:
            whole = fh.read()
        fd = os.open(p, os.O_RDONLY)
        try:
            for _ in range(10):
                off = rng.randrange(len(whole) + 1)
                ln = rng.randrange(1, 70000)
                assert os.pread(fd, ln, off) == whole[off:off + ln]
        finally:
            os.close(fd)


def test_eight_concurrent_readers_agree(mnt):
    _, m = mnt
    files = sorted(all_files(m))
    digests = []

    def reader(seed):
        order = files[:]
        random.Random(seed).shuffle(order)
        d = {}
        for p in order:
            with open(p, "rb") as fh:
                d[p] = hashlib.sha256(fh.read()).hexdigest()
        digests.append(d)

    assert not run_in_threads(reader, 8)
    assert len(digests) == 8 and all(d == digests[0] for d in digests)


def test_numpy_reads_the_tensor_bytes(mnt):
    """numpy, reading the mounted .pt's tensor record in place, sees DeepSpeed's converter output."""
    name, m = mnt
    path = f"{m}/{TAG}_universal/zero/fc1.weight/fp32.pt"
    with zipfile.ZipFile(path) as z:
        rec = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    with open(path, "rb") as f:  # the data follow the local header: 30 bytes, the name, the extra field
        f.seek(rec.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    data = np.fromfile(path, dtype=np.float32, count=rec.file_size // 4,
                       offset=rec.header_offset + 30 + name_len + extra_len)
    ref = tensor_of(torch.load(f"{ref_dir(name)}/zero/fc1.weight/fp32.pt", weights_only=True))
    assert np.array_equal(data, ref.detach().flatten().numpy())


@pytest.mark.parametrize("action", ["write", "create", "unlink", "rename", "mkdir", "chmod", "truncate", "setxattr"])
def test_writes_get_erofs(mnt, action):
    _, m = mnt
    target = f"{m}/{TAG}_universal/zero/optimizer_state.pt"
    ops = {
        "write": lambda: open(target, "r+b"),
        "create": lambda: open(f"{m}/new.txt", "wb"),
        "unlink": lambda: os.unlink(target),
        "rename": lambda: os.rename(target, target + ".x"),
        "mkdir": lambda: os.mkdir(f"{m}/d"),
        "chmod": lambda: os.chmod(target, 0o644),
        "truncate": lambda: os.truncate(target, 0),
        "setxattr": lambda: os.setxattr(target, "user.x", b"1"),
    }
    with pytest.raises(OSError) as e:
        ops[action]()
    # Root passes permission checks, so the read-only mount answers; others may see EACCES first.
    assert e.value.errno == errno.EROFS or (os.geteuid() != 0 and e.value.errno == errno.EACCES)


def test_permissions_are_read_only(mnt):
    _, m = mnt
    assert os.stat(f"{m}/{TAG}_universal/zero/optimizer_state.pt").st_mode & 0o777 == 0o444
    assert os.stat(f"{m}/{TAG}_universal/zero").st_mode & 0o777 == 0o555
