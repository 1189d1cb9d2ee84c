// The index cache: a hit gives the same index, and any change to the shards (or to the entry)
// makes it index again rather than trust stale extents.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/time.h>

#include <fcntl.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "helpers.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;

std::string fragments_text(const ds::TagIndex& ix) {
  std::string s;
  for (const auto& p : ix.params)
    for (size_t k = 0; k < ix.state_names.size(); ++k)
      for (const auto& f : ix.fragments(p, k))
        s += p.name + ":" + std::to_string(f.rank) + ":" + std::to_string(f.extent.offset) + ":" +
             std::to_string(f.extent.length) + ";";
  return s;
}

std::string plain_text(const std::vector<ds::PlainTensor>& v) {
  std::string s;
  for (const auto& t : v) {
    s += t.name + ":" + std::string(pt::dtype_name(t.dtype)) + ":";
    for (const auto& e : t.data)
      s += std::to_string(e.file) + "@" + std::to_string(e.offset) + "+" + std::to_string(e.length) + ";";
  }
  return s;
}

// Every field of the scaler, so that a field the cache forgets shows up.
std::string scaler_text(const ds::LossScaler& l) {
  char b[256];
  snprintf(b, sizeof b, "%d %g %d %lld %lld %g %lld %g %lld %lld %d %d %d", int(l.kind), l.cur_scale, l.dynamic,
           (long long)l.cur_iter, (long long)l.last_overflow_iter, l.scale_factor, (long long)l.scale_window,
           l.min_scale, (long long)l.delayed_shift, (long long)l.cur_hysteresis, l.consecutive_hysteresis,
           l.raise_error_at_min_scale, int(l.dtype));
  return b;
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (int64_t x : v) s += std::to_string(x) + ",";
  return s + "]";
}

std::string frags(const std::vector<ds::Fragment>& v) {
  std::string s;
  for (const auto& f : v)
    s += std::to_string(f.rank) + "/" + std::to_string(f.start) + "/" + std::to_string(f.numel) + "@" +
         std::to_string(f.extent.file) + ":" + std::to_string(f.extent.offset) + "+" + std::to_string(f.extent.length) +
         ";";
  return s;
}

// Every field index_parallel sets, spelled out: a field that the cache's writer and reader both
// forget still shows up here.
std::string parallel_text(const ds::TagIndex& ix) {
  std::string s = "tp " + std::to_string(ix.tp) + " pp " + std::to_string(ix.pp) + " ep " + std::to_string(ix.ep) +
                  " dp " + std::to_string(ix.dp) + " mp " + std::to_string(ix.mp) + " vocab " +
                  std::to_string(ix.original_vocab_size) + "\n";
  for (const auto& f : ix.mp_files) s += "mp_file " + f + "\n";
  for (const auto& f : ix.model_files) s += "model_file " + f + "\n";
  for (const auto& r : ix.sub_param_rules) {
    s += "sub_rule dim " + std::to_string(r.partition_dim);
    for (const auto& p : r.patterns) s += " " + p;
    for (size_t k = 0; k < r.shape.size(); ++k) s += " " + ints(r.shape[k]) + (r.is_tuple[k] ? "t" : "");
    s += "\n";
  }
  for (const auto& [key, list] : ix.patterns) {
    s += "patterns " + key;
    for (const auto& p : list) s += " " + p;
    s += "\n";
  }
  s += "autoep " + (ix.autoep_layers ? pt::repr(ix.autoep_layers, 6) : std::string("none")) + "\n";
  for (const auto& p : ix.params) {
    s += p.name + " " + ints(p.shape) + " numel " + std::to_string(p.numel) + " step " + std::to_string(p.step) +
         " group " + std::to_string(p.group) + " rule " + ds::tp_rule_name(p.rule) + " cat " +
         std::to_string(p.cat_dim) + " vocab " + std::to_string(p.vocab) + " sub " + std::to_string(p.sub_rule) +
         " merged " + std::to_string(p.merged_numel) + " experts " + std::to_string(p.ep_num_experts) + " widths";
    for (const auto& w : p.sub_widths) s += " " + ints(w);
    s += "\n";
    for (const auto& sl : p.slices) {
      s += "  slice " + ints(sl.shape);
      for (const auto& st : sl.stored) s += " | " + frags(st);
      s += "\n";
    }
  }
  return s;
}

// Every file below `dir` of a view, with its bytes.
void files_below(const view::View& v, const view::Inode& dir, const std::string& path,
                 std::map<std::string, std::string>& out) {
  for (uint64_t c : dir.folder().children) {
    const view::Inode& n = *v.tree().get(c);
    if (n.is_dir()) {
      files_below(v, n, path + "/" + n.name, out);
      continue;
    }
    const auto f = v.open(n, O_RDONLY);
    std::string bytes(f.size(), '\0');
    EXPECT_EQ(f.read(0, bytes.data(), bytes.size()), bytes.size()) << path << "/" << n.name;
    out[path + "/" + n.name] = std::move(bytes);
  }
}

std::map<std::string, std::string> universal_files(const std::string& checkpoint, bool strict) {
  view::ViewOptions o;
  o.tp_strict = strict;
  auto v = view::View::load(checkpoint, o);
  const view::Inode* u = v->tree().lookup(view::Tree::kRoot, "global_step2_universal");
  EXPECT_NE(u, nullptr);
  std::map<std::string, std::string> out;
  if (u) files_below(*v, *u, "", out);
  return out;
}

const std::vector<std::string> kParallelFixtures = {
    "tp2_dp1_z1",        "tp2_dp2_z2", "tp2_dp1_z3",          "tp2_dp1_z1_fused",  "tp2_dp1_z1_avg",
    "tp2_dp1_z1_swiglu", "pp2_dp1_z1", "pp2_tp2_z1_patterns", "tp2_dp1_z2_frozen", "autoep_ep2_z2"};

const std::vector<std::string> kAllFixtures = {"z1_ws2_fp32_pg2",       "z2_ws2_fp32_pg2",         "z3_ws2_fp32_pg2",
                                               "z3_ws2_fp32_pg2_sg200", "z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2",
                                               "z3_ws2_bf16_pg2",       "z2_ws2_fp16_pg2"};

class IndexCache : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = temp_dir();
    setenv("XDG_CACHE_HOME", cache_.c_str(), 1);
    unsetenv("ZEROMOUNT_NO_INDEX_CACHE");
  }
  std::string cache_;
};

TEST_F(IndexCache, HitEqualsFreshIndex) {
  for (const auto& name : kAllFixtures) {
    SCOPED_TRACE(name);
    const std::string tag = kFixtures + "/" + name + "/checkpoint/global_step3";
    bool hit = true;
    auto fresh = ds::index_tag_cached(tag, &hit);
    EXPECT_FALSE(hit);
    auto cached = ds::index_tag_cached(tag, &hit);
    EXPECT_TRUE(hit) << name;
    EXPECT_EQ(fragments_text(*cached), fragments_text(*fresh));
    EXPECT_EQ(cached->params.size(), fresh->params.size());
    EXPECT_EQ(pt::repr(cached->optim_meta, 4), pt::repr(fresh->optim_meta, 4));
    EXPECT_EQ(pt::repr(cached->param_groups, 4), pt::repr(fresh->param_groups, 4));
    EXPECT_EQ(plain_text(cached->frozen), plain_text(fresh->frozen));
    EXPECT_EQ(plain_text(cached->module_frozen), plain_text(fresh->module_frozen));
    EXPECT_EQ(plain_text(cached->module_weights), plain_text(fresh->module_weights));
    EXPECT_EQ(plain_text(cached->buffers), plain_text(fresh->buffers));
    EXPECT_EQ(cached->optimizer, fresh->optimizer);
    EXPECT_EQ(cached->module_dtype, fresh->module_dtype);
    EXPECT_EQ(cached->step_kind, fresh->step_kind);
    EXPECT_EQ(scaler_text(cached->loss_scaler), scaler_text(fresh->loss_scaler));
    EXPECT_EQ(ds::serialize_index(*cached), ds::serialize_index(*fresh));
  }
}

TEST_F(IndexCache, ParallelIndexesRoundTrip) {
  for (const auto& name : kParallelFixtures) {
    SCOPED_TRACE(name);
    const std::string checkpoint = kFixtures + "/" + name + "/checkpoint";
    const bool strict = name != "tp2_dp1_z2_frozen";  // mounted with --tp-no-strict
    bool hit = true;
    auto fresh = ds::index_tag_cached(checkpoint + "/global_step2", &hit, strict);
    EXPECT_FALSE(hit);
    auto cached = ds::index_tag_cached(checkpoint + "/global_step2", &hit, strict);
    EXPECT_TRUE(hit);
    ASSERT_TRUE(cached->parallel());
    EXPECT_EQ(parallel_text(*cached), parallel_text(*fresh));
    EXPECT_EQ(pt::repr(cached->optim_meta, 4), pt::repr(fresh->optim_meta, 4));
    EXPECT_TRUE(ds::serialize_index(*cached) == ds::serialize_index(*fresh));
    // The universal files made from the cached index are those made from a fresh one.
    const auto from_cache = universal_files(checkpoint, strict);
    setenv("ZEROMOUNT_NO_INDEX_CACHE", "1", 1);
    const auto from_fresh = universal_files(checkpoint, strict);
    unsetenv("ZEROMOUNT_NO_INDEX_CACHE");
    EXPECT_GE(from_fresh.size(), 10u);
    ASSERT_EQ(from_cache.size(), from_fresh.size());
    for (const auto& [path, bytes] : from_fresh) EXPECT_TRUE(from_cache.at(path) == bytes) << path;
  }
}

TEST_F(IndexCache, NoStrictEntryIsNotServedToAStrictMount) {
  const std::string tag = kFixtures + "/tp2_dp1_z2_frozen/checkpoint/global_step2";
  bool hit = true;
  ds::index_tag_cached(tag, &hit, false);
  ds::index_tag_cached(tag, &hit, false);
  EXPECT_TRUE(hit);
  EXPECT_THROW(ds::index_tag_cached(tag, &hit, true), std::exception);  // strict still refuses
}

TEST_F(IndexCache, StaleWhenAShardChanges) {
  const std::string dst = temp_dir() + "/global_step3";
  copy_fixture("z3_ws2_fp32_pg2/checkpoint/global_step3", dst);
  bool hit = true;
  ds::index_tag_cached(dst, &hit);
  ds::index_tag_cached(dst, &hit);
  ASSERT_TRUE(hit);
  // Same bytes, new mtime: the identity changed, so the entry is not trusted.
  struct timeval tv[2] = {{1000, 0}, {1000, 0}};
  utimes((dst + "/zero_pp_rank_1_mp_rank_00_optim_states.pt").c_str(), tv);
  ds::index_tag_cached(dst, &hit);
  EXPECT_FALSE(hit);
  ds::index_tag_cached(dst, &hit);
  EXPECT_TRUE(hit);
  // A new file in the tag folder changes what the index would be.
  fs::copy(dst + "/zero_pp_rank_1_mp_rank_00_model_states.pt", dst + "/zero_pp_rank_9_mp_rank_00_model_states.pt");
  ds::index_tag_cached(dst, &hit);
  EXPECT_FALSE(hit);
}

TEST_F(IndexCache, CorruptEntriesAreIgnored) {
  const std::string tag = kFixtures + "/z2_ws2_fp32_pg2/checkpoint/global_step3";
  bool hit = true;
  ds::index_tag_cached(tag, &hit);
  for (const auto& e : fs::directory_iterator(cache_ + "/zeromount")) {
    std::string bytes = read_file(e.path());
    bytes[bytes.size() / 2] ^= 0x40;
    write_file(e.path(), bytes);
  }
  auto ix = ds::index_tag_cached(tag, &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(ix->params.size(), 9u);
  EXPECT_THROW(ds::deserialize_index("ZMIDX003garbage!"), FormatError);
  // An entry of a previous format (002: no parallel fields) is not read as this one.
  std::string old = ds::serialize_index(*ix);
  old[7] = '2';
  EXPECT_THROW(ds::deserialize_index(old), FormatError);
}

// An entry whose checksum holds but whose enum is out of range (a bug, or a write from another
// version under the same format number) is refused, and the tag indexed again: never a value cast
// from a wrong number.
TEST_F(IndexCache, AnEnumOutOfRangeRefusesTheEntry) {
  const std::string tag = kFixtures + "/z2_ws2_fp32_pg2/checkpoint/global_step3";
  bool hit = false;
  const auto fresh = ds::index_tag_cached(tag, &hit);
  ASSERT_FALSE(hit);
  const std::string good = ds::serialize_index(*fresh);
  // The body after magic and checksum: tag, dir, stage, dp, mp, optimizer, bf16_optimizer, master_dtype.
  const size_t optimizer = 16 + 8 + fresh->tag.size() + 8 + fresh->dir.size() + 3 * 8, master_dtype = optimizer + 16;
  for (size_t at : {optimizer, master_dtype}) {
    std::string bad = good;
    const uint64_t v = 200;
    memcpy(bad.data() + at, &v, 8);
    const uint64_t sum = XXH3_64bits(bad.data() + 16, bad.size() - 16);
    memcpy(bad.data() + 8, &sum, 8);
    EXPECT_THROW(ds::deserialize_index(bad), FormatError) << at;
    for (const auto& e : fs::directory_iterator(cache_ + "/zeromount")) write_file(e.path(), bad);
    const auto again = ds::index_tag_cached(tag, &hit);
    EXPECT_FALSE(hit) << at;
    EXPECT_EQ(ds::serialize_index(*again), good) << at;
  }
}

}  // namespace
}  // namespace zm::test
