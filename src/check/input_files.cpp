// Any folder or file, file by file: a zip (.pt, .bin) for its records, its pickle and its tensors;
// a safetensors file for its header and tiling; a sharded weights folder's index against its
// shards. A universal folder's zero/<param>/<state>.pt give their parameter's states; DeepSpeed's
// own rank files found here are checked as files, their tensors left to a tag's reading.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "readers.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/safetensors_read.h"

namespace zm::check {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxFiles = 1'000'000;

bool zip_magic(const std::string& path) {
  std::ifstream s(path, std::ios::binary);
  char m[4] = {};
  s.read(m, 4);
  return s.gcount() == 4 && m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4;
}

bool deepspeed_file(const std::string& name) {
  return name.ends_with("_optim_states.pt") || name.ends_with("_model_states.pt");
}

// "zero/fc1.weight/exp_avg.pt" -> ("fc1.weight", "exp_avg"), at any depth; nothing otherwise.
std::optional<std::pair<std::string, std::string>> universal_name(const fs::path& rel) {
  const fs::path parent = rel.parent_path();
  if (rel.extension() != ".pt" || parent.parent_path().filename() != "zero") return std::nullopt;
  return std::make_pair(parent.filename().string(), rel.stem().string());
}

void read_pt(const std::string& path, const std::string& rel, Input& in, Findings& f) {
  auto pt = open_pt(path, rel, in, f);
  if (!pt) return;
  collect_steps(*pt, rel, in);
  const std::string name = fs::path(rel).filename().string();
  if (deepspeed_file(name) || name == "optimizer_state.pt") return;  // tensors left to a tag's reading
  if (name.starts_with("rng_state")) return;                         // the Trainer's RNG states: not model state
  const uint32_t id = in.files.add(path);
  if (is_torch_optimizer(pt->root)) return read_torch_optimizer(*pt, id, rel, in, f);
  if (const auto u = universal_name(rel)) {
    if (u->second == "optimizer_state") return;
    collect_tensors(*pt, id, rel, in, u->first, u->second);
    // A bare step value (an int) is still the parameter's step.
    if (u->second == kStep && pt->root && (pt->root->is(pt::Kind::Int) || pt->root->is(pt::Kind::Float))) {
      Item it;
      it.param = u->first;
      it.state = kStep;
      it.stored = rel;
      it.dtype = pt::DType::F64;
      it.value = pt->root->is(pt::Kind::Int) ? double(pt->root->i) : pt->root->f;
      in.items.push_back(std::move(it));
    }
    return;
  }
  collect_tensors(*pt, id, rel, in);
}

}  // namespace

void read_safetensors(const std::string& path, const std::string& name, Input& in, Findings& f) {
  pt::st::Header h;
  try {
    pt::File file(path);
    h = pt::st::read_header(file);
    f.ran("files-open");
    f.ran("safetensors-layout");
  } catch (const Error& e) {
    f.fail(std::string(e.what()).find("JSON") != std::string::npos || fs::file_size(path) < 8 ? "files-open"
                                                                                              : "safetensors-layout",
           name, e.what());
    return;
  }
  const uint32_t id = in.files.add(path);
  for (const auto& e : h.tensors) {
    Item it;
    it.param = e.name;
    it.state = kWeight;
    it.stored = name + ": key " + e.name;
    it.dtype = e.dtype;
    it.shape = e.shape;
    if (e.end > e.begin) it.bytes.append_extent({id, e.begin, e.end - e.begin});
    in.items.push_back(std::move(it));
  }
}

void read_safetensors_index(const std::string& path, Input& in, Findings& f) {
  const std::string name = fs::path(path).filename().string();
  std::ifstream s(path, std::ios::binary);
  std::stringstream text;
  text << s.rdbuf();
  std::vector<std::pair<std::string, std::string>> map;
  try {
    map = pt::st::read_index(text.str(), path);
  } catch (const Error& e) {
    f.fail("safetensors-index", name, e.what());
    return;
  }
  f.ran("safetensors-index");
  // Each key must be in the shard the index names, and each shard's keys in the index.
  std::map<std::string, std::set<std::string>> by_file;
  for (const auto& [key, file] : map) by_file[file].insert(key);
  const fs::path dir = fs::path(path).parent_path();
  for (const auto& [file, keys] : by_file) {
    std::set<std::string> held;
    try {
      for (const auto& e : pt::st::read_header(pt::File((dir / file).string())).tensors) held.insert(e.name);
    } catch (const Error& e) {
      f.fail("safetensors-index", name, "names " + file + ", which does not read: " + e.what());
      continue;
    }
    for (const auto& k : keys)
      if (!held.count(k))
        f.fail("safetensors-index", name + ": key '" + k + "'", "not in " + file + ", where the index puts it");
    for (const auto& k : held)
      if (!keys.count(k))
        f.fail("safetensors-index", file + ": key '" + k + "'", "not in the index: a loader never reads it");
  }
}

void read_files(const std::string& path, Input& in, Findings& f) {
  std::vector<std::pair<std::string, std::string>> files;  // (path, relative name)
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end && files.size() < kMaxFiles;
         it.increment(ec))
      if (it->is_regular_file(ec)) files.emplace_back(it->path().string(), fs::relative(it->path(), path).string());
    std::sort(files.begin(), files.end());
  } else {
    files.emplace_back(path, fs::path(path).filename().string());
  }
  bool universal = false, weights_only = true;
  size_t skipped = 0;
  for (const auto& [p, rel] : files) {
    const bool zip = zip_magic(p);
    if (rel.ends_with(".safetensors")) {
      read_safetensors(p, rel, in, f);
    } else if (rel.ends_with(".safetensors.index.json")) {
      read_safetensors_index(p, in, f);
    } else if (zip || rel.ends_with(".pt") || rel.ends_with(".bin")) {
      universal |= universal_name(rel).has_value();
      read_pt(p, rel, in, f);
    } else {
      ++skipped;
    }
  }
  for (const auto& it : in.items) weights_only &= it.state == kWeight;
  const bool dir = fs::is_directory(path, ec);
  in.kind = universal                 ? "universal folder"
            : !in.torch_order.empty() ? (dir ? "torch checkpoint folder (optimizer.pt)" : "torch optimizer file")
            : dir                     ? "folder of files"
                                      : "file";
  // A format that keeps no optimizer state: a diff against it compares weights only.
  in.holds_optimizer = universal || !weights_only;
  in.holds_others = !universal;
  if (skipped) f.notes.push_back(std::to_string(skipped) + " file(s) neither zip nor safetensors: not read");
}

}  // namespace zm::check
