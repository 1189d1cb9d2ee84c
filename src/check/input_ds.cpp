// A DeepSpeed tag: every file of its folder opened and its records checked, `latest` followed, the
// index built (ds::index_tag refuses a missing key or a short shard by name), every state's
// fragments checked to cover its parameter once, and each parameter's states as items.
#include <algorithm>
#include <filesystem>

#include "readers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/state_bytes.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace fs = std::filesystem;

namespace {

std::string chosen_tag(const ds::CheckpointDir& d, const std::string& path, const std::string& tag, Findings& f) {
  const std::string root_name = fs::path(d.root).filename().string();
  if (d.root_is_tag && (tag.empty() || tag == root_name)) return d.root;
  if (!tag.empty()) {
    if (std::find(d.tags.begin(), d.tags.end(), tag) == d.tags.end())
      throw Error(path + ": --tag " + tag + ": no such tag folder (with *_optim_states.pt files)", ENOENT);
    return (fs::path(d.root) / tag).string();
  }
  if (d.latest && std::find(d.tags.begin(), d.tags.end(), *d.latest) != d.tags.end())
    return (fs::path(d.root) / *d.latest).string();
  f.notes.push_back("no usable 'latest': verifying the last tag in training order, " + d.tags.back());
  return (fs::path(d.root) / d.tags.back()).string();
}

// `latest` must name a tag folder that indexes: a save cut off after writing `latest` (or a
// keep-last-N cleanup that removed its tag) leaves a resume that fails or, worse, picks another.
void check_latest(const ds::CheckpointDir& d, const std::string& verified, bool verified_ok, Findings& f) {
  if (d.root_is_tag || !d.latest) return;
  const std::string subject = d.root + "/latest";
  if (std::find(d.tags.begin(), d.tags.end(), *d.latest) == d.tags.end()) {
    f.fail("latest", subject, "names '" + *d.latest + "', which is not a tag folder with *_optim_states.pt files");
    return;
  }
  const std::string dir = (fs::path(d.root) / *d.latest).string();
  if (dir == verified) {
    if (verified_ok)
      f.ran("latest");
    else
      f.fail("latest", subject, "names '" + *d.latest + "', which does not index (see ds-index)");
    return;
  }
  try {
    ds::index_tag(dir);
    f.ran("latest");
  } catch (const Error& e) {
    f.fail("latest", subject, "names '" + *d.latest + "', which does not index: " + e.what());
  }
}

// The pieces of each state, in order, must cover [0, numel) once: a gap or an overlap is a
// partition that the loader would read as other parameters' values.
void check_fragments(const ds::TagIndex& ix, Findings& f) {
  if (ix.parallel()) {
    f.notes.push_back("ds-fragments: a tensor-parallel source; its merge is checked by the index");
    return;
  }
  for (const auto& p : ix.params)
    for (size_t k = 0; k < ix.state_names.size(); ++k) {
      if (!ix.has(p, k)) continue;
      f.ran("ds-fragments");
      uint64_t at = 0;
      for (const auto& fr : ix.fragments(p, k)) {
        if (fr.start != at) {
          f.fail("ds-fragments", p.name + " " + ix.state_names[k],
                 "rank " + std::to_string(fr.rank) + "'s piece starts at element " + std::to_string(fr.start) +
                     ", the pieces before end at " + std::to_string(at));
          break;
        }
        at += fr.numel;
      }
      if (at != p.numel)
        f.fail("ds-fragments", p.name + " " + ix.state_names[k],
               "the pieces hold " + std::to_string(at) + " elements of " + std::to_string(p.numel));
    }
}

void add_plain(const ds::PlainTensor& t, const std::string& state, bool trainable, const std::string& stored,
               const std::vector<uint32_t>& file_of, Input& in) {
  Item it;
  it.param = t.name;
  it.state = state;
  it.stored = stored;
  it.trainable = trainable;
  it.dtype = t.dtype;
  it.shape = t.shape;
  uint64_t left = t.numel() * pt::element_size(t.dtype);
  for (pt::Extent x : t.data) {
    x.length = std::min(x.length, left);
    left -= x.length;
    x.file = file_of.at(x.file);
    if (x.length) it.bytes.append_extent(x);
  }
  in.items.push_back(std::move(it));
}

void add_items(const ds::TagIndex& ix, Input& in) {
  std::vector<uint32_t> file_of;
  for (const auto& s : ix.shards) file_of.push_back(in.files.add(s.path));
  const ds::ExtentMap map = [&file_of](const pt::Extent& e) {
    return pt::Extent{file_of.at(e.file), e.offset, e.length};
  };
  for (size_t pi = 0; pi < ix.params.size(); ++pi) {
    const ds::Param& p = ix.params[pi];
    for (size_t k = 0; k < ix.state_names.size(); ++k) {
      if (!ix.has(p, k)) continue;
      Item it;
      it.param = p.name;
      it.state = state_named(ix.state_names[k]);
      it.stored = p.name + " " + ix.state_names[k] + (k == 0 ? " (fp32 master" : " (optimizer state") + ", group " +
                  std::to_string(p.group) + ")";
      it.dtype = ix.master_dtype;
      it.shape = p.shape;
      ds::state_bytes(ix, p, k, map, it.bytes);
      in.items.push_back(std::move(it));
    }
    if (p.step >= 0)
      if (const ds::StepValue* sv = ix.step(size_t(p.step)); sv && sv->kind != ds::StepValue::None) {
        Item it;
        it.param = p.name;
        it.state = kStep;
        it.stored = p.name + " step (group " + std::to_string(p.group) + "'s)";
        it.dtype = sv->kind == ds::StepValue::Tensor ? sv->dtype : pt::DType::F64;
        it.shape = sv->kind == ds::StepValue::Tensor ? sv->shape : std::vector<int64_t>{};
        if (sv->kind == ds::StepValue::Tensor)
          it.bytes.append_extent(map(sv->extent));
        else
          it.value = sv->kind == ds::StepValue::Int ? double(sv->i) : sv->f;
        in.items.push_back(std::move(it));
      }
    if (ix.module_weights.size() == ix.params.size())
      add_plain(ix.module_weights[pi], kModule, true, p.name + " in the model-state file's module", file_of, in);
  }
  // Tied parameters (lm_head.weight and the embedding): the weights folders and the Trainer's own
  // model.safetensors keep the alias with its parameter's bytes; a universal folder does not
  // (not trainable: compared only where the other side keeps buffers and such too).
  for (const auto& [alias, canon] : ix.shared)
    for (size_t k = 0, n = in.items.size(); k < n; ++k)
      if (in.items[k].param == canon && in.items[k].state == kWeight) {
        Item it = in.items[k];
        it.param = alias;
        it.trainable = false;
        it.stored = alias + " (tied to " + canon + "'s fp32 master)";
        in.items.push_back(std::move(it));
        break;
      }
  // Stage 1 and BF16_Optimizer keep frozen parameters in the module only (in training precision).
  for (const auto& t : ix.frozen.empty() ? ix.module_frozen : ix.frozen)
    add_plain(t, kWeight, false, t.name + " (frozen)", file_of, in);
  for (const auto& t : ix.buffers) add_plain(t, kWeight, false, t.name + " (buffer)", file_of, in);
}

}  // namespace

void read_deepspeed(const std::string& path, const std::string& tag, Input& in, Findings& f) {
  const ds::CheckpointDir d = ds::scan_checkpoint(path);
  const std::string dir = chosen_tag(d, path, tag, f);
  in.kind = "deepspeed tag " + fs::path(dir).filename().string();
  // Every file of the tag folder: its records and its pickle; the steps each rank saved.
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  RankGroups groups;
  for (const auto& n : names) {
    if (!n.ends_with(".pt")) continue;
    const std::string file = (fs::path(dir) / n).string();
    if (auto pt = open_pt(file, n, in, f)) {
      collect_steps(*pt, n, in);
      if (n.ends_with("_optim_states.pt")) groups.add(*pt, n);
    }
  }
  groups.check(f);
  try {
    in.index = ds::index_tag(dir);
    f.ran("ds-index");
  } catch (const Error& e) {
    f.fail(muon_copy_differs(e.what()) ? "ranks-agree" : "ds-index", fs::path(dir).filename().string(), e.what());
  }
  check_latest(d, dir, in.index != nullptr, f);
  if (!in.index) return;
  muon_copies_agree(*in.index, f);
  check_fragments(*in.index, f);
  add_items(*in.index, in);
  add_index_hypers(*in.index, "rank 0's param_groups", in, f);
  if (in.index->module_weights.empty())
    f.notes.push_back("module-matches-masters: a ZeRO-3 tag keeps no module weights beside its masters");
}

}  // namespace zm::check
