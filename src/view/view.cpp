#include "zeromount/view/view.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/browse.h"

namespace zm::view {

namespace fs = std::filesystem;

std::string param_dir_name(std::string_view name) {
  if (name == ".") return "%2E";
  if (name == "..") return "%2E%2E";
  std::string out;
  for (char c : name) {
    if (c == '%')
      out += "%25";
    else if (c == '/')
      out += "%2F";
    else if (c == '\0')
      out += "%00";
    else
      out.push_back(c);
  }
  if (out.empty()) return "%";
  if (out.size() > 255) {
    char h[24];
    snprintf(h, sizeof h, "%%~%016llx", (unsigned long long)XXH3_64bits(name.data(), name.size()));
    out = out.substr(0, 200) + h;
  }
  return out;
}

namespace {

pt::VirtualFile inline_file(std::string text) {
  pt::VirtualFile f;
  f.append_inline(text);
  return f;
}

}  // namespace

uint64_t View::add_passthrough(uint64_t parent, const std::string& name, const std::string& path) {
  const uint32_t id = files_.add(path);
  const struct stat& st = files_.stat(id);
  const uint64_t size = uint64_t(st.st_size);
  return tree_.add_file(
      parent, name, st.st_mtim,
      [id, size] {
        pt::VirtualFile f;
        f.append_extent({id, 0, size});
        return f;
      },
      size);
}

void View::mirror(const std::string& real_dir, uint64_t dir) {
  std::vector<fs::directory_entry> entries;
  for (const auto& e : fs::directory_iterator(real_dir)) entries.push_back(e);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  for (const auto& e : entries) {
    const std::string name = e.path().filename().string();
    std::error_code ec;
    if (e.is_symlink(ec) && e.is_directory(ec)) {
      spdlog::warn("{}: symbolic link to a folder is not shown", e.path().string());
    } else if (e.is_directory(ec)) {
      struct stat st {};
      ::stat(e.path().c_str(), &st);
      mirror(e.path().string(), tree_.add_dir(dir, name, st.st_mtim));
    } else if (e.is_regular_file(ec)) {
      add_passthrough(dir, name, e.path().string());
    }
  }
}

void View::add_universal(uint64_t parent, const std::string& name, const MountedTag& tag, struct timespec mtime) {
  const ds::TagIndex& ix = *tag.index;
  const uint64_t u = tree_.add_dir(parent, name, mtime);
  // Both model-state name families, whatever stage saved the checkpoint (spec §6.6).
  add_passthrough(u, ds::model_states_name(0), ix.model_files.at(0));
  for (int r = 0; r < ix.dp; ++r)
    add_passthrough(u, ds::zero_model_states_name(r, 0), ix.model_files.at(ix.stage == 3 ? size_t(r) : 0));
  const uint64_t zero = tree_.add_dir(u, "zero", mtime);
  const MountedTag* t = &tag;
  tree_.add_file(zero, "optimizer_state.pt", mtime, [t] { return optimizer_state_file(*t); });
  const bool bare = opts_.bare_zero3_tensors && ix.stage == 3;
  for (const ds::Param& p : ix.params) {
    const uint64_t d = tree_.add_dir(zero, param_dir_name(p.name), mtime);
    const ds::Param* pp = &p;
    for (size_t k = 0; k < ix.state_names.size(); ++k)
      tree_.add_file(d, ix.state_names[k] + ".pt", mtime,
                     [t, pp, k, bare] { return param_state_file(*t, *pp, k, bare); });
    if (p.step >= 0 && ix.steps.at(size_t(p.step)).kind != ds::StepValue::None) {
      const ds::StepValue* s = &ix.steps[size_t(p.step)];
      tree_.add_file(d, "step.pt", mtime, [t, s] { return step_file(*t, *s); });
    }
  }
  stats_.params += ix.params.size();
}

void View::add_params(uint64_t parent, const std::string& name, const MountedTag& tag, struct timespec mtime) {
  const ds::TagIndex& ix = *tag.index;
  const MountedTag* t = &tag;
  const uint64_t d = tree_.add_dir(parent, name, mtime);
  const std::string readme = params_readme(ix.tag);
  tree_.add_file(
      d, "README", mtime, [readme] { return inline_file(readme); }, readme.size());
  tree_.add_file(d, "summary", mtime, [t] { return inline_file(params_summary(*t->index)); });
  for (const ds::Param& p : ix.params) {
    const uint64_t pd = tree_.add_dir(d, param_dir_name(p.name), mtime);
    const ds::Param* pp = &p;
    // The statistics read the whole parameter, so stat() sizes the text without them.
    tree_.add_file(
        pd, "info", mtime, [this, t, pp] { return inline_file(param_info(*t, *pp, &files_)); },
        [t, pp] { return uint64_t(param_info(*t, *pp, nullptr).size()); });
    for (size_t k = 0; k < ix.state_names.size(); ++k)
      tree_.add_file(pd, ix.state_names[k] + ".npy", mtime, [t, pp, k] { return param_npy(*t, *pp, k); });
  }
}

void View::add_fp32(uint64_t parent, const std::string& name, const MountedTag& tag, struct timespec mtime) {
  const MountedTag* t = &tag;
  const uint64_t d = tree_.add_dir(parent, name, mtime);
  tree_.add_file(d, "model.safetensors", mtime, [t] { return model_safetensors(*t); });
}

std::unique_ptr<View> View::open(const std::string& source, const ViewOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  const ds::CheckpointDir dir = ds::scan_checkpoint(source);
  struct stat root_st {};
  ::stat(dir.root.c_str(), &root_st);
  std::unique_ptr<View> v(new View(opts, root_st.st_mtim));
  v->uid_ = getuid();
  v->gid_ = getgid();

  std::vector<std::string> tag_dirs;
  if (dir.root_is_tag) tag_dirs.push_back(dir.root);
  for (const auto& t : dir.tags) tag_dirs.push_back((fs::path(dir.root) / t).string());
  for (const auto& td : tag_dirs) {
    bool hit = false;
    auto ix = ds::index_tag_cached(td, &hit);
    v->stats_.cache_hits += hit;
    auto ts = std::make_unique<MountedTag>();
    ts->index = ix.get();
    for (const auto& s : ix->shards) {
      const uint32_t id = v->files_.add(s.path);
      v->files_.expect(id, s.size, s.mtime_ns, s.inode);
      ts->file_of_shard.push_back(id);
    }
    v->stats_.state_bytes += ix->state_bytes();
    v->indexes_.push_back(std::move(ix));
    v->tags_.push_back(std::move(ts));
  }
  const auto t1 = std::chrono::steady_clock::now();

  Tree& tree = v->tree_;
  const struct timespec mtime = root_st.st_mtim;
  std::optional<std::string> latest = dir.latest;
  if (dir.root_is_tag) {
    // A tag folder mounted on its own becomes a checkpoint folder holding that one tag.
    const std::string tag = fs::path(dir.root).filename().string();
    v->mirror(dir.root, tree.add_dir(Tree::kRoot, tag, mtime));
    latest = tag;
    tree.add_file(
        Tree::kRoot, "latest", mtime, [tag] { return inline_file(tag); }, tag.size());
  } else {
    v->mirror(dir.root, Tree::kRoot);
  }
  for (const auto& ts : v->tags_) {
    using Adder = void (View::*)(uint64_t, const std::string&, const MountedTag&, struct timespec);
    for (auto [suffix, add] : {std::pair<const char*, Adder>{"_universal", &View::add_universal},
                               {"_params", &View::add_params},
                               {"_fp32", &View::add_fp32}}) {
      const std::string name = ts->index->tag + suffix;
      if (tree.lookup(Tree::kRoot, name)) {
        spdlog::warn("{}/{}: a real folder of that name exists; showing it instead of a made-up one", dir.root, name);
        continue;
      }
      (v.get()->*add)(Tree::kRoot, name, *ts, mtime);
    }
  }
  if (latest && !tree.lookup(Tree::kRoot, "latest_universal") && tree.lookup(Tree::kRoot, *latest + "_universal")) {
    const std::string text = *latest + "_universal";
    tree.add_file(
        Tree::kRoot, "latest_universal", mtime, [text] { return inline_file(text); }, text.size());
  }
  v->stats_.tags = v->tags_.size();
  v->stats_.files = tree.files();
  v->stats_.nodes = tree.size();
  v->stats_.shards = v->files_.size();
  v->stats_.index_seconds = std::chrono::duration<double>(t1 - t0).count();
  return v;
}

struct stat View::attr(const Inode& n) const {
  struct stat st {};
  st.st_ino = n.ino;
  st.st_uid = uid_;
  st.st_gid = gid_;
  st.st_mtim = st.st_ctim = st.st_atim = n.mtime;
  st.st_blksize = 1 << 20;  // coreutils and Python size their reads by it; bigger requests help FUSE
  if (n.dir) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
    return st;
  }
  st.st_mode = S_IFREG | 0444;
  st.st_nlink = 1;
  uint64_t size = n.size.load(std::memory_order_relaxed);
  if (size == Inode::kUnknown && n.sizer) n.size.store(size = n.sizer(), std::memory_order_relaxed);
  if (size == Inode::kUnknown) size = content(n)->size();
  st.st_size = off_t(size);
  st.st_blocks = blkcnt_t((size + 511) / 512);
  return st;
}

std::shared_ptr<const pt::VirtualFile> View::content(const Inode& n) const {
  if (n.dir || !n.build) throw Error("not a file", EISDIR);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cached_.find(n.ino);
    if (it != cached_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto built = std::make_shared<const pt::VirtualFile>(n.build());
  const uint64_t known = n.size.load(std::memory_order_relaxed);
  if (known == Inode::kUnknown)
    n.size.store(built->size(), std::memory_order_relaxed);
  else if (known != built->size())
    throw Error(describe(n) + ": size changed from " + std::to_string(known) + " to " + std::to_string(built->size()),
                EIO);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cached_.count(n.ino)) return built;  // another thread built it too; theirs is cached
  lru_.emplace_front(n.ino, built);
  cached_.emplace(n.ino, lru_.begin());
  cached_bytes_ += built->memory_bytes();
  while (cached_bytes_ > opts_.cache_bytes && lru_.size() > 1) {
    cached_bytes_ -= lru_.back().second->memory_bytes();
    cached_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return built;
}

std::string View::describe(const Inode& n) const {
  std::string path;
  for (const Inode* p = &n; p && p->ino != Tree::kRoot; p = tree_.get(p->parent)) path = "/" + p->name + path;
  return path.empty() ? "/" : path;
}

}  // namespace zm::view
