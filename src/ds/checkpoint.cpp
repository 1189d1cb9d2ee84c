#include "zeromount/ds/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include "builders.h"
#include "parallel.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/shard_set.h"
#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/source_path.h"
#include "zeromount/ds/sources.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"

namespace zm::ds {

namespace fs = std::filesystem;

namespace {

// `dir`'s path joined with one of its names.
std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

bool is_link(const Dir& dir, const Dir::Entry& e) {
  struct stat st {};
  return e.type == DT_LNK || (e.type == DT_UNKNOWN && dir.stat(e.name, st) && S_ISLNK(st.st_mode));
}

// One optimizer class stores 'step' one way; groups that differ mean a hand-edited file. A group
// may keep none (Muon's).
StepValue::Kind common_step_kind(const TagIndex& index) {
  StepValue::Kind kind = StepValue::None;
  for (size_t s = 0; s < index.scalars.size(); ++s)
    if (const StepValue* v = index.step(s)) {
      if (kind != StepValue::None && v->kind != kind)
        throw FormatError(where(index.dir, "param groups store 'step' as different types"));
      kind = v->kind;
    }
  return kind;
}

}  // namespace

// By name only: a tag folder's entries are not followed here (a link loop in it must not stop the scan).
bool holds_optim_states(const Dir& dir) {
  std::error_code ec;
  for (const Dir::Entry& e : dir.list(ec)) {
    auto n = parse_shard_name(e.name);
    if (n && n->kind == FileKind::OptimStates) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> tag_folder_files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  const Dir d = open_dir(dir);
  std::error_code ec;
  const std::vector<Dir::Entry> entries = d.ok() ? d.list(ec) : std::vector<Dir::Entry>{};
  if (!d.ok()) ec = std::error_code(errno, std::generic_category());
  for (const Dir::Entry& e : entries) {
    std::string path = join(dir, e.name);
    struct stat st {};
    bool found = false;
    if (is_link(d, e)) {
      // A linked shard is read where it lies, found without looking into the mount: a link into
      // it refuses the tag (a shard read from our own mount would wait on itself).
      try {
        path = resolve(path);
      } catch (const Error&) {
        if (parse_shard_name(e.name)) throw;
        continue;
      }
      found = ::stat(path.c_str(), &st) == 0;
    } else {
      found = d.stat(e.name, st, true);
    }
    if (found && S_ISREG(st.st_mode)) {
      files.emplace_back(e.name, std::move(path));
    } else if (parse_shard_name(e.name)) {
      const int err = errno;
      throw Error(where(join(dir, e.name), st.st_mode ? "not a regular file (" + file_kind_text(st.st_mode) + ")"
                                                      : "cannot be followed: " + std::string(strerror(err))),
                  st.st_mode ? EINVAL : err);
    }
  }
  if (ec) throw Error(where(dir, "cannot list: " + ec.message()), ec.value());
  return files;
}

bool tag_order(const std::string& a, const std::string& b) {
  // Numbers compare as numbers: global_step20 before global_step100, as training wrote them.
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (isdigit((unsigned char)a[i]) && isdigit((unsigned char)b[j])) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && isdigit((unsigned char)a[i2])) ++i2;
      while (j2 < b.size() && isdigit((unsigned char)b[j2])) ++j2;
      const std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      const std::string xs = x.substr(std::min(x.find_first_not_of('0'), x.size())),
                        ys = y.substr(std::min(y.find_first_not_of('0'), y.size()));
      if (xs.size() != ys.size()) return xs.size() < ys.size();
      if (xs != ys) return xs < ys;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// An entry of a listed folder as a folder to look into: links resolved without entering the
// mount; not ok() when it is no folder or cannot be followed. A folder that is not a link is opened
// relative to `dir`, at any depth for the same cost.
static OpenFolder folder_at(const OpenFolder& dir, const Dir::Entry& e, const std::string& skip,
                            std::string* why = nullptr) {
  OpenFolder out;
  out.path = join(dir.path, e.name);
  if (out.path == skip) return {};
  if (is_link(dir.dir, e)) {
    try {
      out.path = resolve(out.path);
    } catch (const Error& err) {
      // A link into the mount is refused aloud; a dangling link or a loop is just a link (the
      // mirror shows it as one), not a refusal.
      if (why && err.errno_value() == EDEADLK) *why = err.what();
      return {};
    }
    out.dir = open_dir(out.path);
  } else if (struct stat st{};
             e.type == DT_DIR || (e.type == DT_UNKNOWN && dir.dir.stat(e.name, st) && S_ISDIR(st.st_mode))) {
    out.dir = dir.dir.open(e.name);
  }
  if (!out.dir.ok()) return {};
  return out;
}

bool any_folder_in(const OpenFolder& dir, const std::string& skip, const std::function<bool(const OpenFolder&)>& is) {
  std::error_code ec;
  for (const Dir::Entry& e : dir.dir.list(ec))
    if (const OpenFolder d = folder_at(dir, e, skip); d.dir.ok() && is(d)) return true;
  return false;
}

bool holds_tag_folder(const OpenFolder& dir, const std::string& skip) {
  return any_folder_in(dir, skip, [](const OpenFolder& d) { return reader_of(d.dir) != nullptr; });
}

bool holds_tag_folder(const std::string& dir, const std::string& skip) {
  return holds_tag_folder(OpenFolder{dir, open_dir(dir)}, skip);
}

std::optional<std::string> read_latest(const Dir& root) {
  return root.ok() ? root.read_file("latest", size_t(kLatestMaxBytes)) : std::nullopt;
}

std::optional<std::string> read_latest(const std::string& root) {
  return read_latest(open_dir(root));
}

std::string latest_tag(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";  // Python's str.strip()
  const size_t b = text.find_first_not_of(kSpace);
  return b == std::string_view::npos ? "" : std::string(text.substr(b, text.find_last_not_of(kSpace) - b + 1));
}

CheckpointDir scan_checkpoint(const std::string& path, const std::string& skip) {
  std::error_code ec;
  const std::string root = fs::canonical(path, ec).string();
  if (ec) throw Error(path + ": " + ec.message(), ENOENT);
  if (!fs::is_directory(root, ec)) throw Error(path + ": not a directory", ENOTDIR);
  return scan_folder(root, skip, path);
}

CheckpointDir scan_folder(const std::string& root, const std::string& skip, const std::string& named) {
  CheckpointDir c;
  c.root = root;
  const std::string& path = named.empty() ? root : named;
  // A folder that cannot be listed would be served as an empty mirror: say why instead.
  const OpenFolder dir{root, open_dir(root)};
  std::error_code ec;
  if (!dir.dir.ok()) ec = std::error_code(errno, std::generic_category());
  const std::vector<Dir::Entry> entries = dir.dir.ok() ? dir.dir.list(ec) : std::vector<Dir::Entry>{};
  if (ec) throw Error(path + ": cannot list: " + ec.message(), ec.value());
  if (const auto text = read_latest(dir.dir)) c.latest = latest_tag(*text);
  c.root_is_tag = reader_of(dir.dir) != nullptr;
  // A tag folder reached twice (a real one and an alias link to it) is one tag, under its real
  // name; a link to a folder elsewhere is a tag under the link's name.
  std::map<std::string, std::pair<bool, std::string>> by_target;  // canonical -> (is a link, name)
  for (const Dir::Entry& e : entries) {
    std::string why;
    const OpenFolder target = folder_at(dir, e, skip, &why);
    const bool link = is_link(dir.dir, e);
    if (!why.empty() && link) c.refused.emplace_back(e.name, why);
    if (!target.dir.ok() || !reader_of(target.dir)) continue;
    auto [at, fresh] = by_target.try_emplace(target.path, link, e.name);
    if (!fresh && at->second.first && (!link || e.name < at->second.second)) at->second = {link, e.name};
  }
  for (const auto& [target, named_as] : by_target) c.tags.push_back(named_as.second);
  std::sort(c.tags.begin(), c.tags.end(), tag_order);
  return c;
}

std::unique_ptr<TagIndex> index_tag(const std::string& tag_dir, bool tp_strict) {
  const std::string dir = resolve(fs::absolute(tag_dir).lexically_normal().string());
  if (const SourceReader* r = reader_of(open_dir(dir))) return r->index(dir, tp_strict);
  throw Error(where(dir, "no *_optim_states.pt files and no DCP .metadata: not a training checkpoint"), ENOENT);
}

std::unique_ptr<TagIndex> index_deepspeed(const std::string& tag_dir, bool tp_strict) {
  auto index = std::make_unique<TagIndex>();
  index->dir = resolve(fs::absolute(tag_dir).lexically_normal().string());
  index->tag = fs::path(index->dir).filename().string();
  if (is_parallel_tag(index->dir)) {
    index_parallel(*index, tp_strict);
    index->step_kind = common_step_kind(*index);
    return index;
  }
  std::map<int, std::string> optim, zero_model;
  std::string model;
  for (const auto& [fname, path] : tag_folder_files(index->dir)) {
    auto n = parse_shard_name(fname);
    if (!n) continue;
    // Layer, expert and mp_rank > 0 files make a folder parallel (is_parallel_tag): only an expert
    // optimizer file without expert model states reaches here.
    if (n->kind == FileKind::ExpertOptim)
      throw Error(where(path,
                        "an expert-parallel optimizer file without the expert model-state files "
                        "(layer_L_expert_E_mp_rank_XX_model_states.pt) it belongs with"),
                  ENOTSUP);
    if (n->kind == FileKind::OptimStates) {
      if (!optim.empty() && n->prefix != index->optim_prefix)
        throw FormatError(where(
            path, "optimizer files with different prefixes ('" + index->optim_prefix + "' and '" + n->prefix + "')"));
      index->optim_prefix = n->prefix;
      if (!optim.emplace(n->dp, path).second)
        throw FormatError(where(path, "two optimizer files for dp rank " + std::to_string(n->dp)));
    } else if (n->kind == FileKind::ZeroModelStates) {
      zero_model.emplace(n->dp, path);
    } else if (n->kind == FileKind::ModelStates) {
      model = path;
    }
  }
  if (optim.empty()) throw Error(where(index->dir, "no *_optim_states.pt files: not a ZeRO checkpoint"), ENOENT);
  TagFiles files;
  const int world = optim.rbegin()->first + 1;
  for (int r = 0; r < world; ++r) {
    auto it = optim.find(r);
    if (it == optim.end())
      throw FormatError(where(index->dir + "/" + optim_states_name(index->optim_prefix, r, 0),
                              "missing: dp ranks 0.." + std::to_string(world - 1) + " need one optimizer file each"));
    files.optim.push_back(it->second);
  }
  index->dp = world;

  ShardSet shards(*index);
  OpenShard rank0 = shards.open(files.optim[0]);
  const Field osd = rank0.root()["optimizer_state_dict"];
  auto stage = osd.find("zero_stage");
  index->bf16_optimizer = !stage;
  index->stage = stage ? int(stage->as_int()) : 1;
  if (index->stage == 3) {
    for (int r = 0; r < world; ++r) {
      auto it = zero_model.find(r);
      if (it == zero_model.end())
        throw FormatError(where(index->dir + "/" + zero_model_states_name(r, 0),
                                "missing: ZeRO-3 needs a model-state file per dp rank"));
      files.model.push_back(it->second);
    }
    index_zero3(*index, shards, files, rank0);
  } else if (index->stage == 1 || index->stage == 2) {
    if (model.empty()) throw FormatError(where(index->dir + "/" + model_states_name(0), "missing: ZeRO-1/2 needs it"));
    files.model.push_back(model);
    index_zero12(*index, shards, files, rank0);
  } else {
    throw Error(where(files.optim[0], "unsupported zero_stage " + std::to_string(index->stage)), ENOTSUP);
  }
  index->model_files = files.model;
  index->step_kind = common_step_kind(*index);
  return index;
}

}  // namespace zm::ds
