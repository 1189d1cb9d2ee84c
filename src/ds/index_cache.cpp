#include "zeromount/ds/index_cache.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "builders.h"

#include <concepts>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <type_traits>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/source_fs.h"
#include "zeromount/ds/source_path.h"
#include "zeromount/ds/sources.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/pickle_writer.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::ds {

namespace fs = std::filesystem;

namespace {

// 002: optimizer class, module dtype, step kind, loss scaler, module weights and frozen params.
// 003: parallel sources (tensor-parallel slices, merge rules, patterns, AutoEP metadata).
constexpr char kMagic[8] = {'Z', 'M', 'I', 'D', 'X', '0', '0', '6'};

template <class T, class U>
concept is = std::same_as<std::remove_const_t<T>, U>;

// The one field list of a cache entry, in file order: serialize_index writes it through Out (T
// const), deserialize_index reads it back through In. Every integer is 8 bytes (a signed one
// sign-extended), a double its 8 bytes, a string or list its count and then its items, a pickle
// value its protocol-2 bytes; a scalar enum is checked against its last enumerator when read.
template <class Ar, class T>
void fields(Ar& ar, T& x) {
  if constexpr (is<T, pt::Extent>) {
    ar(x.file, x.offset, x.length);
  } else if constexpr (is<T, Fragment>) {
    ar(x.rank, x.start, x.numel, x.extent);
  } else if constexpr (is<T, PlainTensor>) {
    ar(x.name, x.dtype, x.shape, x.data);
  } else if constexpr (is<T, LossScaler>) {
    ar(x.kind, x.cur_scale, x.dynamic, x.cur_iter, x.last_overflow_iter, x.scale_factor, x.scale_window, x.min_scale,
       x.delayed_shift, x.cur_hysteresis, x.consecutive_hysteresis, x.raise_error_at_min_scale, x.dtype);
  } else if constexpr (is<T, StepValue>) {
    ar(x.kind, x.dtype, x.shape, x.extent, x.i, x.f);
  } else if constexpr (is<T, TpSlice>) {
    ar(x.shape, x.stored);
  } else if constexpr (is<T, Param>) {
    ar(x.name, x.shape, x.numel, x.group, x.sub_group, x.step, x.offset, x.stored);
    // What index_parallel adds to a parameter (tag_index.h): its slices and its merge rule.
    ar(x.slices, x.rule, x.cat_dim, x.vocab, x.sub_rule, x.sub_widths, x.merged_numel, x.ep_num_experts);
  } else if constexpr (is<T, Shard>) {
    ar(x.path, x.size, x.mtime_ns, x.inode, x.pickle_hash);
  } else if constexpr (is<T, SubParamRule>) {
    ar(x.patterns, x.shape, x.is_tuple, x.partition_dim);
  } else {
    static_assert(is<T, TagIndex>, "a type the cache does not store");
    ar(x.tag, x.dir, x.stage, x.dp, x.mp, x.optimizer, x.bf16_optimizer, x.master_dtype, x.module_dtype, x.step_kind,
       x.elastic, x.loss_scaler, x.optim_prefix, x.ds_version, x.state_names, x.scalar_names, x.whole_states,
       x.group_states, x.params, x.scalars, x.num_groups, x.frozen, x.module_frozen, x.module_weights, x.buffers,
       x.rank_buffers, x.shared, x.shards, x.model_files, x.sub_groups, x.flat_offsets, x.optim_shard, x.optim_meta,
       x.param_groups);
    // What index_parallel adds to the tag: the grid, the model-state files, universal_checkpoint_info.
    ar(x.tp, x.pp, x.ep, x.mp_files, x.sub_param_rules, x.original_vocab_size, x.patterns, x.autoep_layers);
  }
}

// How many values each enum stored in an entry has: a larger one is a corrupt entry, not a wrapped one.
constexpr uint64_t enum_count(pt::DType) {
  return uint64_t(pt::DType::C128) + 1;
}
constexpr uint64_t enum_count(OptimizerClass) {
  return uint64_t(OptimizerClass::BF16_Optimizer) + 1;
}
constexpr uint64_t enum_count(StepValue::Kind) {
  return StepValue::Float + 1;
}
constexpr uint64_t enum_count(LossScaler::Kind) {
  return LossScaler::Dynamic + 1;
}
constexpr uint64_t enum_count(TpRule) {
  return uint64_t(TpRule::Expert) + 1;
}

// The fewest bytes one item of a list of T takes in an entry: a list's count must fit in what is left.
template <class T>
constexpr uint64_t item_bytes() {
  if constexpr (is<T, pt::Extent>)
    return 24;
  else if constexpr (is<T, Fragment>)
    return 48;
  else if constexpr (is<T, Shard>)
    return 40;
  else if constexpr (is<T, PlainTensor> || is<T, SubParamRule>)
    return 32;
  else if constexpr (is<T, StepValue>)
    return 56;
  else if constexpr (is<T, Param>)
    return 64;
  else if constexpr (is<T, TpSlice>)
    return 16;
  else if constexpr (requires(T t) { t.first; })
    return 16;
  else
    return 8;
}

class Out {
 public:
  template <class... T>
  void operator()(const T&... v) {
    (put(v), ...);
  }
  std::string s;

 private:
  void u64(uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  template <class T>
  void put(const T& v) {
    if constexpr (std::is_enum_v<T>) {
      u64(uint64_t(v));
    } else if constexpr (std::is_integral_v<T>) {
      u64(std::is_signed_v<T> ? uint64_t(int64_t(v)) : uint64_t(v));
    } else if constexpr (std::is_same_v<T, double>) {
      s.append(reinterpret_cast<const char*>(&v), 8);
    } else if constexpr (std::is_same_v<T, std::string>) {
      u64(v.size());
      s += v;
    } else if constexpr (std::is_same_v<T, const pt::Node*>) {
      put(v ? pt::pickle_value(v).pickle : std::string());
    } else if constexpr (requires { v.first; }) {
      put(v.first);
      put(v.second);
    } else if constexpr (requires {
                           v.size();
                           v.begin();
                         }) {
      u64(v.size());
      for (const auto& x : v) put(x);
    } else {
      fields(*this, v);
    }
  }
};

class In {
 public:
  In(const std::string& b, pt::Arena& arena) : b_(b), arena_(arena) {}
  template <class... T>
  void operator()(T&... v) {
    (get(v), ...);
  }
  std::string str() {
    std::string v;
    get(v);
    return v;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  uint64_t u64() {
    if (8 > b_.size() - at_) throw FormatError("index cache: truncated");
    uint64_t v;
    memcpy(&v, b_.data() + at_, 8);
    at_ += 8;
    return v;
  }
  uint64_t count(uint64_t unit) {  // a length that must fit in what is left
    const uint64_t n = u64();
    if (n > (b_.size() - at_) / unit) throw FormatError("index cache: truncated");
    return n;
  }
  template <class T>
  void get(T& v) {
    if constexpr (std::is_enum_v<T>) {
      const uint64_t e = u64();
      if (e >= enum_count(T{})) throw FormatError("index cache: enum value " + std::to_string(e) + " out of range");
      v = T(e);
    } else if constexpr (std::is_same_v<T, bool>) {
      v = u64() != 0;
    } else if constexpr (std::is_integral_v<T>) {
      v = T(u64());
    } else if constexpr (std::is_same_v<T, double>) {
      const uint64_t u = u64();
      memcpy(&v, &u, 8);
    } else if constexpr (std::is_same_v<T, std::string>) {
      const uint64_t n = count(1);
      v = b_.substr(at_, n);
      at_ += n;
    } else if constexpr (std::is_same_v<T, const pt::Node*>) {
      const std::string p = str();
      auto none = [](const std::string&, uint64_t) -> uint64_t {
        throw FormatError("index cache: tensor in metadata");
      };
      v = p.empty() ? nullptr : pt::decode_pickle(p, arena_, "index cache", none);
    } else if constexpr (requires { v.first; }) {
      get(v.first);
      get(v.second);
    } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
      v.resize(count(8));
      for (size_t k = 0; k < v.size(); ++k) v[k] = u64() != 0;
    } else if constexpr (requires { v.resize(0); }) {
      v.resize(count(item_bytes<typename T::value_type>()));
      for (auto& x : v) get(x);
    } else {
      fields(*this, v);
    }
  }
  const std::string& b_;
  pt::Arena& arena_;
  size_t at_ = 0;
};

// The shard-like names in a tag folder: a new or vanished rank file makes the entry stale.
std::string listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (parse_shard_name(e.path().filename().string())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::string s;
  for (const auto& n : names) s += n + "\n";
  return s;
}

uint64_t pickle_hash(const std::string& path) {
  return pt::pickle_hash(pt::File(path));
}

bool still_valid(const TagIndex& ix) {
  // Shards are kept by the path their links led to: a link pointed elsewhere since is a change.
  std::set<std::string> now;
  for (auto& [name, path] : tag_folder_files(ix.dir)) now.insert(std::move(path));
  for (const auto& s : ix.shards) {
    if (!now.count(s.path)) return false;
    struct stat st;
    if (::stat(s.path.c_str(), &st) != 0 || uint64_t(st.st_size) != s.size || uint64_t(st.st_ino) != s.inode ||
        pt::mtime_ns(st) != s.mtime_ns)
      return false;
    // A network source (object storage through FUSE, NFS, Lustre, ...): size, mtime and inode are
    // what the mount itself trusts to tell a changed shard (ESTALE), and reading every pickle again
    // costs range requests per shard on each mount. An object's ETag would be better, but no FUSE
    // client shows it (no xattr in rclone 1.60, s3fs, mountpoint-s3). Local disks keep the hash:
    // there a rewrite in place within one mtime tick is cheap to catch.
    if (!network_filesystem(s.path).empty()) continue;
    if (pickle_hash(s.path) != s.pickle_hash) return false;
  }
  return true;
}

// --tp-no-strict indexes what a strict mount refuses: each mode has its own entry.
std::string entry_path(const std::string& cache, const std::string& tag_dir, bool tp_strict) {
  const std::string key = tag_dir + (tp_strict ? "" : "\n--tp-no-strict");
  char h[20];
  snprintf(h, sizeof h, "%016llx", (unsigned long long)XXH3_64bits(key.data(), key.size()));
  return cache + "/" + h + ".idx";
}

}  // namespace

std::string serialize_index(const TagIndex& ix) {
  Out o;
  fields(o, ix);
  o(listing(ix.dir));
  const uint64_t sum = XXH3_64bits(o.s.data(), o.s.size());
  return std::string(kMagic, 8) + std::string(reinterpret_cast<const char*>(&sum), 8) + o.s;
}

std::unique_ptr<TagIndex> deserialize_index(const std::string& bytes) {
  if (bytes.size() < 16 || memcmp(bytes.data(), kMagic, 8) != 0) throw FormatError("index cache: not an index");
  uint64_t sum;
  memcpy(&sum, bytes.data() + 8, 8);
  const std::string body = bytes.substr(16);
  if (XXH3_64bits(body.data(), body.size()) != sum) throw FormatError("index cache: checksum mismatch");
  auto ix = std::make_unique<TagIndex>();
  In in(body, ix->arena);
  fields(in, *ix);
  const std::string names = in.str();
  if (!in.done()) throw FormatError("index cache: trailing bytes");
  if (names != listing(ix->dir)) throw FormatError("index cache: the tag folder's files changed");
  for (const auto& g : ix->group_states)
    if (g.size() != ix->state_names.size()) throw FormatError("index cache: per-group states");
  if (!ix->whole_states.empty() && ix->whole_states.size() != ix->state_names.size())
    throw FormatError("index cache: whole states");
  for (const auto& group : ix->scalars)
    if (group.size() != ix->scalar_names.size()) throw FormatError("index cache: per-group values");
  // Every extent must name a shard the entry lists.
  auto check = [&](const pt::Extent& e) {
    if (e.file >= ix->shards.size()) throw FormatError("index cache: extent of an unknown shard");
  };
  for (const auto& p : ix->params) {
    for (const auto& fs_ : p.stored)
      for (const auto& f : fs_) check(f.extent);
    for (const auto& sl : p.slices)
      for (const auto& fs_ : sl.stored)
        for (const auto& f : fs_) check(f.extent);
    if (p.rule == TpRule::SubParams && (p.sub_rule < 0 || size_t(p.sub_rule) >= ix->sub_param_rules.size()))
      throw FormatError("index cache: bad sub-parameter rule");
    if (ix->parallel() && p.slices.empty()) throw FormatError("index cache: a parallel parameter without slices");
    if (!ix->group_states.empty() && (p.group < 0 || size_t(p.group) >= ix->group_states.size()))
      throw FormatError("index cache: a parameter's group has no states");
  }
  for (const auto& group : ix->scalars)
    for (const auto& s : group)
      if (s.kind == StepValue::Tensor) check(s.extent);
  std::vector<const std::vector<PlainTensor>*> lists = {&ix->frozen, &ix->module_frozen, &ix->module_weights,
                                                        &ix->buffers};
  for (const auto& r : ix->rank_buffers) lists.push_back(&r);
  for (const auto* list : lists)
    for (const auto& t : *list)
      for (const auto& e : t.data) check(e);
  for (uint32_t v : ix->optim_shard)
    if (v >= ix->shards.size()) throw FormatError("index cache: bad shard id");
  if (ix->stage == 3 && ix->flat_offsets.size() != size_t(ix->dp) * ix->sub_groups * ix->state_names.size())
    throw FormatError("index cache: stage-3 layout size");
  return ix;
}

std::string index_cache_dir() {
  const char* off = getenv("ZEROMOUNT_NO_INDEX_CACHE");
  if (off && *off && strcmp(off, "0") != 0) return "";
  std::string base;
  if (const char* x = getenv("XDG_CACHE_HOME"); x && *x)
    base = x;
  else if (const char* h = getenv("HOME"); h && *h)
    base = std::string(h) + "/.cache";
  else
    return "";
  return base + "/zeromount";
}

std::unique_ptr<TagIndex> index_tag_cached(const std::string& tag_dir, bool* hit, bool tp_strict) {
  if (hit) *hit = false;
  const std::string cache = index_cache_dir();
  if (cache.empty()) return index_tag(tag_dir, tp_strict);
  const std::string dir = resolve(fs::absolute(tag_dir).lexically_normal().string());
  if (const SourceReader* reader = reader_of(open_dir(dir)); reader && !reader->cached)
    return reader->index(dir, tp_strict);
  const std::string entry = entry_path(cache, dir, tp_strict);
  try {
    std::ifstream in(entry, std::ios::binary);
    if (in) {
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      auto ix = deserialize_index(bytes);
      if (ix->dir == dir && still_valid(*ix)) {
        if (hit) *hit = true;
        // There its shards were trusted by size, mtime and inode alone (still_valid): say so, since
        // a shard rewritten in place with the same three keeps its old values (README).
        if (!ix->shards.empty() && !network_filesystem(ix->shards[0].path).empty())
          spdlog::info(
              "{}: index from the cache, its shards checked by size, mtime and inode only (a network "
              "source); --no-index-cache reads their pickles again",
              dir);
        return ix;
      }
      spdlog::info("{}: index cache is stale; indexing again", dir);
    }
  } catch (const std::exception& e) {
    spdlog::info("{}: index cache not used ({}); indexing again", dir, e.what());
  }
  auto ix = index_tag(dir, tp_strict);
  try {
    fs::create_directories(cache);
    const std::string tmp = entry + ".tmp." + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary | std::ios::trunc) << serialize_index(*ix);
    fs::rename(tmp, entry);
  } catch (const std::exception& e) {
    spdlog::debug("{}: cannot write the index cache: {}", dir, e.what());
  }
  return ix;
}

}  // namespace zm::ds
