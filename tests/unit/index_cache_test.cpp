// The index cache: a hit gives the same index, and any change to the shards (or to the entry)
// makes it index again rather than trust stale extents.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/time.h>

#include <filesystem>

#include "helpers.h"
#include "zeromount/ds/index_cache.h"
#include "zeromount/pt/error.h"

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

TEST_F(IndexCache, StaleWhenAShardChanges) {
  const std::string dst = temp_dir() + "/global_step3";
  fs::copy(kFixtures + "/z3_ws2_fp32_pg2/checkpoint/global_step3", dst);
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
  EXPECT_THROW(ds::deserialize_index("ZMIDX002garbage!"), FormatError);
  // An entry of the previous format (no precision fields) is not read as this one.
  std::string old = ds::serialize_index(*ix);
  old[7] = '1';
  EXPECT_THROW(ds::deserialize_index(old), FormatError);
}

}  // namespace
}  // namespace zm::test
