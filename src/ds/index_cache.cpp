#include "zeromount/ds/index_cache.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "builders.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/source_fs.h"
#include "zeromount/ds/source_path.h"
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

class Out {
 public:
  void u64(uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  void str(const std::string& v) {
    u64(v.size());
    s += v;
  }
  void extent(const pt::Extent& e) {
    u64(e.file);
    u64(e.offset);
    u64(e.length);
  }
  void shape(const std::vector<int64_t>& v) {
    u64(v.size());
    for (int64_t d : v) i64(d);
  }
  void node(const pt::Node* n) { str(n ? pt::pickle_value(n).pickle : std::string()); }
  void strs(const std::vector<std::string>& v) {
    u64(v.size());
    for (const auto& x : v) str(x);
  }
  void shapes(const std::vector<std::vector<int64_t>>& v) {
    u64(v.size());
    for (const auto& x : v) shape(x);
  }
  std::string s;
};

constexpr uint64_t kDTypes = uint64_t(pt::DType::C128) + 1;  // the last DType

class In {
 public:
  explicit In(const std::string& b) : b_(b) {}
  uint64_t u64() {
    need(8);
    uint64_t v;
    memcpy(&v, b_.data() + at_, 8);
    at_ += 8;
    return v;
  }
  // An enum stored as a u64: a value past its last enumerator is a corrupt entry, not a wrapped one.
  template <typename E>
  E enumerator(uint64_t count) {
    const uint64_t v = u64();
    if (v >= count) throw FormatError("index cache: enum value " + std::to_string(v) + " out of range");
    return E(v);
  }
  int64_t i64() { return int64_t(u64()); }
  double f64() {
    const uint64_t v = u64();
    double d;
    memcpy(&d, &v, 8);
    return d;
  }
  uint64_t count(uint64_t unit) {  // a length that must fit in what is left
    const uint64_t n = u64();
    if (n > (b_.size() - at_) / unit) throw FormatError("index cache: truncated");
    return n;
  }
  std::string str() {
    const uint64_t n = count(1);
    std::string s = b_.substr(at_, n);
    at_ += n;
    return s;
  }
  pt::Extent extent() {
    pt::Extent e;
    e.file = uint32_t(u64());
    e.offset = u64();
    e.length = u64();
    return e;
  }
  std::vector<int64_t> shape() {
    std::vector<int64_t> v(count(8));
    for (auto& d : v) d = i64();
    return v;
  }
  const pt::Node* node(pt::Arena& arena) {
    const std::string p = str();
    if (p.empty()) return nullptr;
    auto none = [](const std::string&, uint64_t) -> uint64_t { throw FormatError("index cache: tensor in metadata"); };
    return pt::decode_pickle(p, arena, "index cache", none);
  }
  std::vector<std::string> strs() {
    std::vector<std::string> v(count(8));
    for (auto& x : v) x = str();
    return v;
  }
  std::vector<std::vector<int64_t>> shapes() {
    std::vector<std::vector<int64_t>> v(count(8));
    for (auto& x : v) x = shape();
    return v;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void need(uint64_t n) {
    if (n > b_.size() - at_) throw FormatError("index cache: truncated");
  }
  const std::string& b_;
  size_t at_ = 0;
};

void fragments_out(Out& o, const std::vector<Fragment>& v) {
  o.u64(v.size());
  for (const auto& f : v) {
    o.u64(f.rank);
    o.u64(f.start);
    o.u64(f.numel);
    o.extent(f.extent);
  }
}

std::vector<Fragment> fragments_in(In& in) {
  std::vector<Fragment> v(in.count(48));
  for (auto& f : v) {
    f.rank = uint32_t(in.u64());
    f.start = in.u64();
    f.numel = in.u64();
    f.extent = in.extent();
  }
  return v;
}

void plain_out(Out& o, const std::vector<PlainTensor>& v) {
  o.u64(v.size());
  for (const auto& t : v) {
    o.str(t.name);
    o.u64(uint64_t(t.dtype));
    o.shape(t.shape);
    o.u64(t.data.size());
    for (const auto& e : t.data) o.extent(e);
  }
}

std::vector<PlainTensor> plain_in(In& in) {
  std::vector<PlainTensor> v(in.count(32));
  for (auto& t : v) {
    t.name = in.str();
    t.dtype = in.enumerator<pt::DType>(kDTypes);
    t.shape = in.shape();
    t.data.resize(in.count(24));
    for (auto& e : t.data) e = in.extent();
  }
  return v;
}

void scaler_out(Out& o, const LossScaler& ls) {
  o.u64(ls.kind);
  o.f64(ls.cur_scale);
  o.u64(ls.dynamic);
  o.i64(ls.cur_iter);
  o.i64(ls.last_overflow_iter);
  o.f64(ls.scale_factor);
  o.i64(ls.scale_window);
  o.f64(ls.min_scale);
  o.i64(ls.delayed_shift);
  o.i64(ls.cur_hysteresis);
  o.u64(ls.consecutive_hysteresis);
  o.u64(ls.raise_error_at_min_scale);
  o.u64(uint64_t(ls.dtype));
}

LossScaler scaler_in(In& in) {
  LossScaler ls;
  ls.kind = in.enumerator<LossScaler::Kind>(LossScaler::Dynamic + 1);
  ls.cur_scale = in.f64();
  ls.dynamic = in.u64();
  ls.cur_iter = in.i64();
  ls.last_overflow_iter = in.i64();
  ls.scale_factor = in.f64();
  ls.scale_window = in.i64();
  ls.min_scale = in.f64();
  ls.delayed_shift = in.i64();
  ls.cur_hysteresis = in.i64();
  ls.consecutive_hysteresis = in.u64();
  ls.raise_error_at_min_scale = in.u64();
  ls.dtype = in.enumerator<pt::DType>(kDTypes);
  return ls;
}

// What index_parallel adds to a parameter (tag_index.h): its slices and its merge rule.
void parallel_param_out(Out& o, const Param& p) {
  o.u64(p.slices.size());
  for (const auto& sl : p.slices) {
    o.shape(sl.shape);
    o.u64(sl.stored.size());
    for (const auto& f : sl.stored) fragments_out(o, f);
  }
  o.u64(uint64_t(p.rule));
  o.i64(p.cat_dim);
  o.u64(p.vocab);
  o.i64(p.sub_rule);
  o.shapes(p.sub_widths);
  o.u64(p.merged_numel);
  o.i64(p.ep_num_experts);
}

void parallel_param_in(In& in, Param& p) {
  p.slices.resize(in.count(16));
  for (auto& sl : p.slices) {
    sl.shape = in.shape();
    sl.stored.resize(in.count(8));
    for (auto& f : sl.stored) f = fragments_in(in);
  }
  const uint64_t rule = in.u64();
  if (rule > uint64_t(TpRule::Expert)) throw FormatError("index cache: unknown merge rule");
  p.rule = TpRule(rule);
  p.cat_dim = int(in.i64());
  p.vocab = in.u64();
  p.sub_rule = int(in.i64());
  p.sub_widths = in.shapes();
  p.merged_numel = in.u64();
  p.ep_num_experts = in.i64();
}

// What index_parallel adds to the tag: the grid, the model-state files, universal_checkpoint_info.
void parallel_tag_out(Out& o, const TagIndex& ix) {
  o.i64(ix.tp);
  o.i64(ix.pp);
  o.i64(ix.ep);
  o.strs(ix.mp_files);
  o.u64(ix.sub_param_rules.size());
  for (const auto& r : ix.sub_param_rules) {
    o.strs(r.patterns);
    o.shapes(r.shape);
    o.u64(r.is_tuple.size());
    for (bool b : r.is_tuple) o.u64(b);
    o.i64(r.partition_dim);
  }
  o.i64(ix.original_vocab_size);
  o.u64(ix.patterns.size());
  for (const auto& [key, list] : ix.patterns) {
    o.str(key);
    o.strs(list);
  }
  o.node(ix.autoep_layers);
}

void parallel_tag_in(In& in, TagIndex& ix) {
  ix.tp = int(in.i64());
  ix.pp = int(in.i64());
  ix.ep = int(in.i64());
  ix.mp_files = in.strs();
  ix.sub_param_rules.resize(in.count(32));
  for (auto& r : ix.sub_param_rules) {
    r.patterns = in.strs();
    r.shape = in.shapes();
    r.is_tuple.resize(in.count(8));
    for (size_t k = 0; k < r.is_tuple.size(); ++k) r.is_tuple[k] = in.u64();
    r.partition_dim = int(in.i64());
  }
  ix.original_vocab_size = in.i64();
  ix.patterns.resize(in.count(16));
  for (auto& [key, list] : ix.patterns) {
    key = in.str();
    list = in.strs();
  }
  ix.autoep_layers = in.node(ix.arena);
}

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
  pt::File f(path);
  pt::ZipReader zip(f);
  const pt::ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw FormatError(path + ": no data.pkl");
  const std::string bytes = zip.read(*pkl, f.size());
  return pt::hash_bytes(bytes.data(), bytes.size());
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
  o.str(ix.tag);
  o.str(ix.dir);
  o.i64(ix.stage);
  o.i64(ix.dp);
  o.i64(ix.mp);
  o.u64(uint64_t(ix.optimizer));
  o.u64(ix.bf16_optimizer);
  o.u64(uint64_t(ix.master_dtype));
  o.u64(uint64_t(ix.module_dtype));
  o.u64(ix.step_kind);
  o.u64(ix.elastic);
  scaler_out(o, ix.loss_scaler);
  o.str(ix.optim_prefix);
  o.str(ix.ds_version);
  o.u64(ix.state_names.size());
  for (const auto& n : ix.state_names) o.str(n);
  o.u64(ix.scalar_names.size());
  for (const auto& n : ix.scalar_names) o.str(n);
  o.u64(ix.whole_states.size());
  for (bool w : ix.whole_states) o.u64(w);
  o.u64(ix.group_states.size());
  for (const auto& g : ix.group_states) {
    o.u64(g.size());
    for (bool h : g) o.u64(h);
  }
  o.u64(ix.params.size());
  for (const auto& p : ix.params) {
    o.str(p.name);
    o.shape(p.shape);
    o.u64(p.numel);
    o.i64(p.group);
    o.i64(p.sub_group);
    o.i64(p.step);
    o.u64(p.offset);
    o.u64(p.stored.size());
    for (const auto& f : p.stored) fragments_out(o, f);
    parallel_param_out(o, p);
  }
  o.u64(ix.scalars.size());
  for (const auto& group : ix.scalars) {
    o.u64(group.size());
    for (const auto& s : group) {
      o.u64(s.kind);
      o.u64(uint64_t(s.dtype));
      o.shape(s.shape);
      o.extent(s.extent);
      o.i64(s.i);
      o.f64(s.f);
    }
  }
  o.i64(ix.num_groups);
  plain_out(o, ix.frozen);
  plain_out(o, ix.module_frozen);
  plain_out(o, ix.module_weights);
  plain_out(o, ix.buffers);
  o.u64(ix.rank_buffers.size());
  for (const auto& r : ix.rank_buffers) plain_out(o, r);
  o.u64(ix.shared.size());
  for (const auto& [a, c] : ix.shared) {
    o.str(a);
    o.str(c);
  }
  o.u64(ix.shards.size());
  for (const auto& s : ix.shards) {
    o.str(s.path);
    o.u64(s.size);
    o.i64(s.mtime_ns);
    o.u64(s.inode);
    o.u64(s.pickle_hash);
  }
  o.u64(ix.model_files.size());
  for (const auto& m : ix.model_files) o.str(m);
  o.u64(ix.sub_groups);
  o.u64(ix.flat_offsets.size());
  for (uint64_t v : ix.flat_offsets) o.u64(v);
  o.u64(ix.optim_shard.size());
  for (uint32_t v : ix.optim_shard) o.u64(v);
  o.node(ix.optim_meta);
  o.node(ix.param_groups);
  parallel_tag_out(o, ix);
  o.str(listing(ix.dir));
  const uint64_t sum = XXH3_64bits(o.s.data(), o.s.size());
  return std::string(kMagic, 8) + std::string(reinterpret_cast<const char*>(&sum), 8) + o.s;
}

std::unique_ptr<TagIndex> deserialize_index(const std::string& bytes) {
  if (bytes.size() < 16 || memcmp(bytes.data(), kMagic, 8) != 0) throw FormatError("index cache: not an index");
  uint64_t sum;
  memcpy(&sum, bytes.data() + 8, 8);
  const std::string body = bytes.substr(16);
  if (XXH3_64bits(body.data(), body.size()) != sum) throw FormatError("index cache: checksum mismatch");
  In in(body);
  auto ix = std::make_unique<TagIndex>();
  ix->tag = in.str();
  ix->dir = in.str();
  ix->stage = int(in.i64());
  ix->dp = int(in.i64());
  ix->mp = int(in.i64());
  ix->optimizer = in.enumerator<OptimizerClass>(uint64_t(OptimizerClass::BF16_Optimizer) + 1);
  ix->bf16_optimizer = in.u64();
  ix->master_dtype = in.enumerator<pt::DType>(kDTypes);
  ix->module_dtype = in.enumerator<pt::DType>(kDTypes);
  ix->step_kind = in.enumerator<StepValue::Kind>(StepValue::Float + 1);
  ix->elastic = in.u64();
  ix->loss_scaler = scaler_in(in);
  ix->optim_prefix = in.str();
  ix->ds_version = in.str();
  ix->state_names.resize(in.count(8));
  for (auto& n : ix->state_names) n = in.str();
  ix->scalar_names.resize(in.count(8));
  for (auto& n : ix->scalar_names) n = in.str();
  ix->whole_states.resize(in.count(8));
  for (size_t k = 0; k < ix->whole_states.size(); ++k) ix->whole_states[k] = in.u64() != 0;
  ix->group_states.resize(in.count(8));
  for (auto& g : ix->group_states) {
    g.resize(in.count(8));
    for (size_t k = 0; k < g.size(); ++k) g[k] = in.u64() != 0;
    if (g.size() != ix->state_names.size()) throw FormatError("index cache: per-group states");
  }
  if (!ix->whole_states.empty() && ix->whole_states.size() != ix->state_names.size())
    throw FormatError("index cache: whole states");
  ix->params.resize(in.count(64));
  for (auto& p : ix->params) {
    p.name = in.str();
    p.shape = in.shape();
    p.numel = in.u64();
    p.group = int(in.i64());
    p.sub_group = int(in.i64());
    p.step = int(in.i64());
    p.offset = in.u64();
    p.stored.resize(in.count(8));
    for (auto& f : p.stored) f = fragments_in(in);
    parallel_param_in(in, p);
  }
  ix->scalars.resize(in.count(8));
  for (auto& group : ix->scalars) {
    group.resize(in.count(56));
    if (group.size() != ix->scalar_names.size()) throw FormatError("index cache: per-group values");
    for (auto& s : group) {
      s.kind = in.enumerator<StepValue::Kind>(StepValue::Float + 1);
      s.dtype = in.enumerator<pt::DType>(kDTypes);
      s.shape = in.shape();
      s.extent = in.extent();
      s.i = in.i64();
      s.f = in.f64();
    }
  }
  ix->num_groups = int(in.i64());
  ix->frozen = plain_in(in);
  ix->module_frozen = plain_in(in);
  ix->module_weights = plain_in(in);
  ix->buffers = plain_in(in);
  ix->rank_buffers.resize(in.count(8));
  for (auto& r : ix->rank_buffers) r = plain_in(in);
  ix->shared.resize(in.count(16));
  for (auto& [a, c] : ix->shared) {
    a = in.str();
    c = in.str();
  }
  ix->shards.resize(in.count(40));
  for (auto& s : ix->shards) {
    s.path = in.str();
    s.size = in.u64();
    s.mtime_ns = in.i64();
    s.inode = in.u64();
    s.pickle_hash = in.u64();
  }
  ix->model_files.resize(in.count(8));
  for (auto& m : ix->model_files) m = in.str();
  ix->sub_groups = in.u64();
  ix->flat_offsets.resize(in.count(8));
  for (auto& v : ix->flat_offsets) v = in.u64();
  ix->optim_shard.resize(in.count(8));
  for (auto& v : ix->optim_shard) v = uint32_t(in.u64());
  ix->optim_meta = in.node(ix->arena);
  ix->param_groups = in.node(ix->arena);
  parallel_tag_in(in, *ix);
  const std::string names = in.str();
  if (!in.done()) throw FormatError("index cache: trailing bytes");
  if (names != listing(ix->dir)) throw FormatError("index cache: the tag folder's files changed");
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
  const std::string entry = entry_path(cache, dir, tp_strict);
  try {
    std::ifstream in(entry, std::ios::binary);
    if (in) {
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      auto ix = deserialize_index(bytes);
      if (ix->dir == dir && still_valid(*ix)) {
        if (hit) *hit = true;
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
