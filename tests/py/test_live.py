"""A live checkpoint folder, through a real mount: training keeps saving into the folder people
mount. A tag saved after the mount appears once it indexes, `latest` follows the source, names
handed out keep their meaning; `.zeromount/stats` counts what each reader took from the shards;
`-o crc` gives made-up .pt files real CRC-32s. torch, zipfile and the source's bytes are the
independent readers."""
import os
import shutil
import subprocess
import time
import zipfile

import pytest
import torch

from conftest import FIXTURES, ZEROMOUNT, mount

SOURCE = "z2_ws2_fp32_pg2"
TAG = "global_step3"
PARAM = "zero/fc1.weight/fp32.pt"


def copy_source(tmp_path):
    src = tmp_path / "ckpt"
    shutil.copytree(os.path.join(FIXTURES, SOURCE, "checkpoint"), src)
    return src


def save(src, tag, tmp_path, only=None):
    """A save as DeepSpeed's would end: the files written, then visible under the tag's name."""
    staging = tmp_path / f"staging-{tag}"
    staging.mkdir(exist_ok=True)
    for name in os.listdir(src / TAG):
        if only is None or name in only:
            shutil.copy(src / TAG / name, staging / name)
    if (src / tag).exists():
        for name in os.listdir(staging):
            os.rename(staging / name, src / tag / name)
    else:
        os.rename(staging, src / tag)


def wait_for(path, seconds=5.0):
    """The rescan period is 1 s by default and negative entries last as long: poll, as a user would."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.2)
    return False


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def test_a_tag_saved_after_the_mount_appears_and_loads(tmp_path):
    src = copy_source(tmp_path)
    with mount(str(src)) as m:
        before = os.listdir(m)
        with pytest.raises(FileNotFoundError):
            os.stat(f"{m}/global_step5_universal")  # a negative entry the kernel now holds
        old_inode = os.stat(f"{m}/{TAG}_universal/{PARAM}").st_ino
        save(src, "global_step5", tmp_path)
        (src / "latest").write_text("global_step5")
        assert wait_for(f"{m}/global_step5_universal/{PARAM}"), os.listdir(m)
        names = os.listdir(m)
        assert names[:len(before)] == before, "names handed out keep their place"
        assert {"global_step5", "global_step5_params", "global_step5_fp32"} <= set(names)
        assert open(f"{m}/latest").read() == "global_step5"
        assert open(f"{m}/latest_universal").read() == "global_step5_universal"
        assert open(f"{m}/layouts/zero2-dp2-fp32/latest").read() == "global_step5"
        # The new tag's universal file is what the old tag's is (same shard bytes), and torch says so.
        new, old = load(f"{m}/global_step5_universal/{PARAM}"), load(f"{m}/{TAG}_universal/{PARAM}")
        assert torch.equal(new["param"], old["param"])
        shard = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
        assert open(f"{m}/global_step5/{shard}", "rb").read() == open(src / "global_step5" / shard, "rb").read()
        assert os.stat(f"{m}/{TAG}_universal/{PARAM}").st_ino == old_inode
        assert {TAG, "global_step5", "latest"} <= set(os.listdir(f"{m}/layouts/zero2-dp2-fp32"))


def test_a_save_in_progress_is_served_once_its_last_rank_is_written(tmp_path):
    src = copy_source(tmp_path)
    with mount(str(src)) as m:
        save(src, "global_step7", tmp_path, only={"mp_rank_00_model_states.pt",
                                                  "zero_pp_rank_0_mp_rank_00_optim_states.pt"})
        deadline = time.monotonic() + 5
        while "global_step7" not in open(f"{m}/.zeromount/errors").read() and time.monotonic() < deadline:
            os.listdir(m)
            time.sleep(0.2)
        assert "global_step7: " in open(f"{m}/.zeromount/errors").read()
        # An incomplete tag shows its real files only, as a tag refused at mount does.
        assert "global_step7" in os.listdir(m) and "global_step7_universal" not in os.listdir(m)
        assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" not in os.listdir(f"{m}/global_step7")
        save(src, "global_step7", tmp_path, only={"zero_pp_rank_1_mp_rank_00_optim_states.pt"})
        assert wait_for(f"{m}/global_step7_universal/{PARAM}")
        assert open(f"{m}/.zeromount/errors").read() == ""
        assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in os.listdir(f"{m}/global_step7")
        assert torch.equal(load(f"{m}/global_step7_universal/{PARAM}")["param"],
                           load(f"{m}/{TAG}_universal/{PARAM}")["param"])


def test_latest_touched_or_rewritten_is_never_stale(tmp_path):
    src = copy_source(tmp_path)
    with mount(str(src)) as m:
        os.utime(src / "latest", ns=(1, 1))
        assert open(f"{m}/latest").read() == TAG
        (src / "latest").write_text("global_step99")  # names a tag that does not exist
        time.sleep(1.1)
        assert open(f"{m}/latest").read() == TAG, "latest keeps naming a tag the mount serves"
        assert os.path.getsize(f"{m}/latest") == len(TAG)


def test_rescan_zero_serves_the_mount_time_tags(tmp_path):
    src = copy_source(tmp_path)
    with mount(str(src), "-o", "rescan=0") as m:
        save(src, "global_step5", tmp_path)
        time.sleep(1.5)
        assert not os.path.exists(f"{m}/global_step5")
        assert "global_step5" not in os.listdir(m)


def test_a_rescan_that_is_not_a_number_is_refused(tmp_path):
    r = subprocess.run([ZEROMOUNT, str(copy_source(tmp_path)), str(tmp_path), "-o", "rescan=soon"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "-o rescan: 'soon'" in r.stderr, r.stderr


def test_stats_count_the_shard_bytes_each_reader_took(tmp_path):
    with mount(os.path.join(FIXTURES, SOURCE, "checkpoint")) as m:
        path = f"{m}/{TAG}_universal/{PARAM}"
        numel = load(path)["param"].numel()  # read by this process
        lines = open(f"{m}/.zeromount/stats").read().splitlines()
        assert f"pid {os.getpid()} bytes {numel * 4}" in lines, lines
        assert "tags_served 1" in lines and "tags_refused 0" in lines
        assert f"bytes_from_shards {numel * 4}" in lines


def test_crc_option_makes_zip_tools_accept_made_up_files():
    src = os.path.join(FIXTURES, SOURCE, "checkpoint")
    files = [f"{TAG}_universal/{PARAM}", f"{TAG}_universal/zero/optimizer_state.pt",
             "layouts/zero3-dp4-fp32/global_step3/zero_pp_rank_3_mp_rank_00_optim_states.pt"]
    with mount(src) as m:
        bad = [f for f in files if zipfile.ZipFile(f"{m}/{f}").testzip() is not None]
        assert bad, "without -o crc the CRCs are 0, which zipfile rejects"
        plain = {f: open(f"{m}/{f}", "rb").read() for f in files}
    with mount(src, "-o", "crc") as m:
        for f in files:
            assert zipfile.ZipFile(f"{m}/{f}").testzip() is None, f
            data = open(f"{m}/{f}", "rb").read()
            assert len(data) == len(plain[f]), "the option changes CRC fields only"
            assert sum(a != b for a, b in zip(data, plain[f])) <= 8 * len(zipfile.ZipFile(f"{m}/{f}").namelist())
        theirs = os.path.join(FIXTURES, SOURCE, "ds_to_universal", f"{TAG}_universal", PARAM)
        assert torch.equal(load(f"{m}/{files[0]}")["param"], load(theirs)["param"])


def test_a_keep_last_n_cleanup_leaves_new_layout_targets_working(tmp_path):
    """Issue 27, item 4: a target looked up after a tag folder is deleted is made of the tags that
    remain, whether or not the top level was listed since; never an ENOENT for a valid name."""
    src = copy_source(tmp_path)
    save(src, "global_step1", tmp_path)
    with mount(str(src)) as m:
        assert sorted(os.listdir(f"{m}/layouts/zero2-dp4-fp32")) == ["global_step1", "global_step3", "latest"]
        shutil.rmtree(src / "global_step1")
        time.sleep(1.5)  # a rescan period, without listing the top level
        assert sorted(os.listdir(f"{m}/layouts/zero2-dp8-fp32")) == ["global_step3", "latest"]
        assert os.path.isdir(f"{m}/layouts/torch") and os.path.isdir(f"{m}/layouts/fsdp-dp3/optimizer_0")
        os.listdir(m)  # the deletion seen by a rescan: still the same
        assert sorted(os.listdir(f"{m}/layouts/zero3-dp3-fp32")) == ["global_step3", "latest"]
        torch.load(f"{m}/layouts/zero2-dp8-fp32/global_step3/zero_pp_rank_7_mp_rank_00_optim_states.pt")


def test_a_latest_over_4096_bytes_is_a_plain_file_and_nothing_is_made_from_it(tmp_path):
    """Issue 27, item 6: one rule at every size."""
    src = copy_source(tmp_path)
    (src / "latest").write_bytes(b"global_step3" + b" " * 10_000)
    with mount(str(src)) as m:
        assert open(f"{m}/latest", "rb").read() == (src / "latest").read_bytes()
        assert not os.path.exists(f"{m}/latest_universal")
        assert os.path.isdir(f"{m}/layouts/zero2-dp2-fp32/{TAG}")
        assert not os.path.exists(f"{m}/layouts/zero2-dp2-fp32/latest")
