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
  for (const auto& name : kFixtureNames) {
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
    EXPECT_EQ(cached->frozen.size(), fresh->frozen.size());
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
  EXPECT_THROW(ds::deserialize_index("ZMIDX001garbage!"), FormatError);
}

}  // namespace
}  // namespace zm::test
