// The tensor-parallel merge arithmetic against independent references: a brute-force merge built
// element by element from each rule's definition, Python + torch bits for the average, and
// DeepSpeed's own ds_to_universal.py output for real AutoTP fixtures.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "helpers.h"
#include "zeromount/ds/field.h"
#include "zeromount/ds/tp_merge.h"
#include "zeromount/pt/error.h"

namespace zm::test {
namespace {

using ds::Shape;
using ds::TpCat;

uint64_t numel(const Shape& s) {
  uint64_t n = 1;
  for (auto d : s) n *= uint64_t(d);
  return n;
}

// Element e of rank t's slice holds the value t * 2^32 + e: every source element is distinct.
uint64_t tag(uint64_t t, uint64_t e) {
  return (t << 32) | e;
}

// Where output index d along the merge dimension comes from: (rank, index along that rank's dim).
using DimMap = std::vector<std::pair<uint32_t, int64_t>>;

// Brute force: walk every output multi-index in row-major order and look its source up in `map`.
std::vector<uint64_t> brute_force(const std::vector<Shape>& slices, int dim, const DimMap& map) {
  Shape out = slices[0];
  out[size_t(dim)] = int64_t(map.size());
  std::vector<uint64_t> result;
  std::vector<int64_t> idx(out.size(), 0);
  for (uint64_t e = 0; e < numel(out); ++e) {
    const auto [t, local] = map[size_t(idx[size_t(dim)])];
    uint64_t flat = 0;
    for (size_t k = 0; k < out.size(); ++k)
      flat = flat * uint64_t(slices[t][k]) + uint64_t(k == size_t(dim) ? local : idx[k]);
    result.push_back(tag(t, flat));
    for (size_t k = out.size(); k-- > 0;)  // odometer
      if (++idx[k] < out[k])
        break;
      else
        idx[k] = 0;
  }
  return result;
}

DimMap cat_map(const std::vector<Shape>& slices, int dim) {
  DimMap m;
  for (uint32_t t = 0; t < slices.size(); ++t)
    for (int64_t i = 0; i < slices[t][size_t(dim)]; ++i) m.emplace_back(t, i);
  return m;
}

// The runs walked from the start, checking that they tile the output in order.
std::vector<uint64_t> walk(const TpCat& cat) {
  std::vector<uint64_t> out;
  for (uint64_t j = 0; j < cat.num_runs(); ++j) {
    EXPECT_EQ(cat.run_start(j), out.size()) << "run " << j;
    const ds::TpRun r = cat.run(j);
    EXPECT_GT(r.count, 0u);
    EXPECT_LE(r.offset + r.count, cat.rank_numel(r.rank));
    for (uint64_t k = 0; k < r.count; ++k) out.push_back(tag(r.rank, r.offset + k));
  }
  return out;
}

// Random access agrees with the walk: the run found for any element is the one that holds it.
void check_random_access(const TpCat& cat) {
  std::vector<uint64_t> run_of;
  for (uint64_t j = 0; j < cat.num_runs(); ++j) run_of.insert(run_of.end(), cat.run(j).count, j);
  ASSERT_EQ(run_of.size(), cat.numel());
  std::mt19937_64 rng(15);
  for (int k = 0; k < 500 && cat.numel(); ++k) {
    const uint64_t e = k < 2 ? (k ? cat.numel() - 1 : 0) : rng() % cat.numel();
    EXPECT_EQ(cat.run_containing(e), run_of[e]) << "element " << e;
  }
}

void check(const TpCat& cat, const std::vector<Shape>& slices, int dim, const DimMap& map) {
  const auto expected = brute_force(slices, dim, map);
  EXPECT_EQ(cat.numel(), expected.size());
  EXPECT_EQ(walk(cat), expected);
  check_random_access(cat);
}

struct CatCase {
  std::vector<Shape> slices;
  int dim;
};

TEST(TpCat, ConcatEqualsBruteForce) {
  const std::vector<CatCase> cases = {
      {{{19, 16}, {18, 16}}, 0},               // AutoTP lm_head, uneven vocabulary
      {{{16, 12}, {16, 12}}, 1},               // row-parallel
      {{{37, 16}}, 0},                         // T = 1
      {{{5, 3, 7}}, 1},                        // T = 1 on an inner dim
      {{{5, 3, 7}, {5, 2, 7}, {5, 2, 7}}, 1},  // T = 3, uneven, 3-D
      {{{2, 3, 2}, {2, 3, 2}, {2, 3, 1}, {2, 3, 1}, {2, 3, 1}, {2, 3, 1}, {2, 3, 1}, {2, 3, 1}}, 2},  // T = 8
      {{{4, 11}, {4, 11}, {4, 11}, {4, 11}, {4, 11}, {4, 11}, {4, 11}, {4, 10}}, 1},
      {{{3, 0}, {3, 4}, {3, 0}}, 1},  // ranks holding nothing
      {{{7}, {6}, {6}}, 0},           // 1-D bias, T = 3
      {{{0, 4}, {0, 4}}, 0},          // empty
      {{{3, 0, 2}, {3, 0, 2}}, 0},    // empty inner
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.slices) + " dim " + std::to_string(c.dim));
    check(TpCat::concat(c.slices, c.dim), c.slices, c.dim, cat_map(c.slices, c.dim));
  }
}

TEST(TpCat, RowParallelAtScaleIsArithmetic) {
  // 4096 x 11008 at TP 8 on dim 1: 32,768 runs of 1376 elements, found without a table.
  const TpCat cat = TpCat::concat(std::vector<Shape>(8, Shape{4096, 1376}), 1);
  EXPECT_EQ(cat.num_runs(), 32768u);
  EXPECT_EQ(cat.shape(), (Shape{4096, 11008}));
  const uint64_t e = 4095ull * 11008 + 5 * 1376 + 7;  // last row, rank 5, column 7
  const uint64_t j = cat.run_containing(e);
  EXPECT_EQ(j, 4095u * 8 + 5);
  const ds::TpRun r = cat.run(j);
  EXPECT_EQ(r.rank, 5u);
  EXPECT_EQ(r.offset, 4095u * 1376);
  EXPECT_EQ(r.count, 1376u);
  EXPECT_EQ(cat.run_start(j), 4095ull * 11008 + 5 * 1376);
}

TEST(TpCat, TwoSubParamsEqualBruteForce) {
  // torch.chunk(x, 2, 0) halves are ceil(n / 2) and the rest.
  for (const std::vector<Shape>& slices : std::vector<std::vector<Shape>>{
           {{48, 16}, {48, 16}}, {{5, 3}, {4, 3}}, {{7}, {5}, {2}}, {{6, 2, 3}, {6, 2, 3}, {6, 2, 3}}, {{3, 4}}}) {
    SCOPED_TRACE(::testing::PrintToString(slices));
    DimMap m;
    for (int half = 0; half < 2; ++half)
      for (uint32_t t = 0; t < slices.size(); ++t) {
        const int64_t n = slices[t][0], first = (n + 1) / 2;
        for (int64_t i = half ? first : 0; i < (half ? n : first); ++i) m.emplace_back(t, i);
      }
    check(TpCat::two_sub_params(slices), slices, 0, m);
  }
  EXPECT_THROW(TpCat::two_sub_params({{1, 4}, {2, 4}}), FormatError);  // one chunk: DeepSpeed's IndexError
}

TEST(TpCat, SubParamsEqualBruteForce) {
  struct Case {
    std::vector<Shape> views;
    int dim;
    std::vector<std::vector<int64_t>> widths;  // [sub-parameter][rank]
  };
  const std::vector<Case> cases = {
      // tp2_dp1_z1_fused qkv_proj.weight: shape [(16, 8, 8), -1], widths [[8, 8], [4, 4], [4, 4]]
      {{{16, 16}, {16, 16}}, 0, {{8, 8}, {4, 4}, {4, 4}}},
      {{{16}, {16}}, 0, {{8, 8}, {4, 4}, {4, 4}}},                       // its bias
      {{{24, 16}, {24, 16}}, 0, {{12, 12}, {12, 12}}},                   // gate_up_proj (2, -1)
      {{{7, 5}, {6, 5}, {5, 5}}, 0, {{3, 2, 2}, {2, 2, 1}, {2, 2, 2}}},  // uneven GQA-like at T = 3
      {{{4, 6}, {4, 3}}, 1, {{2, 1}, {4, 2}}},                           // partition_dim 1
      {{{2, 3, 5}}, 1, {{1}, {2}}},                                      // T = 1: one run per row after joining
      {{{3, 2}, {0, 2}, {3, 2}}, 0, {{2, 0, 1}, {1, 0, 2}}},             // a rank holding no sub-parameter piece
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.views) + " dim " + std::to_string(c.dim));
    DimMap m;
    std::vector<int64_t> used(c.views.size(), 0);
    for (const auto& w : c.widths)
      for (uint32_t t = 0; t < c.views.size(); ++t)
        for (int64_t i = 0; i < w[t]; ++i) m.emplace_back(t, used[t]++);
    check(TpCat::sub_params(c.views, c.dim, c.widths), c.views, c.dim, m);
  }
  EXPECT_THROW(TpCat::sub_params({{16, 16}, {16, 16}}, 0, {{8, 8}, {4, 4}, {4, 3}}), FormatError);
}

TEST(TpCat, RefusesMismatchedSlices) {
  EXPECT_THROW(TpCat::concat({{16, 12}, {16, 11}}, 0), FormatError);
  EXPECT_THROW(TpCat::concat({{16, 12}, {16}}, 0), FormatError);
  EXPECT_THROW(TpCat::concat({{}}, 0), FormatError);
  EXPECT_THROW(TpCat::concat({{4, 4}}, 2), FormatError);
  EXPECT_THROW(TpCat::concat({}, 0), FormatError);
}

TEST(SubParamViews, ResolvesTheFusedShapes) {
  // tp2_dp1_z1_fused: qkv weight [(16, 8, 8), -1] over 2 x 256 elements; gate_up [(24, 24), -1].
  EXPECT_EQ(ds::sub_param_views({{{16, 8, 8}, {-1}}, 0}, {{8, 8}, {4, 4}, {4, 4}}, {256, 256}, "qkv"),
            (std::vector<Shape>{{16, 16}, {16, 16}}));
  EXPECT_EQ(ds::sub_param_views({{{16, 8, 8}}, 0}, {{8, 8}, {4, 4}, {4, 4}}, {16, 16}, "qkv.bias"),
            (std::vector<Shape>{{16}, {16}}));
  EXPECT_EQ(ds::sub_param_views({{{24, 24}, {-1}}, 0}, {{12, 12}, {12, 12}}, {384, 384}, "gate_up"),
            (std::vector<Shape>{{24, 16}, {24, 16}}));
  // Uneven widths give uneven views.
  EXPECT_EQ(ds::sub_param_views({{{4}, {10, 5}}, 1}, {{6, 4}, {3, 2}}, {36, 24}, "x"),
            (std::vector<Shape>{{4, 9}, {4, 6}}));
  auto msg = [](auto f) {
    try {
      f();
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg([] {
              ds::sub_param_views({{{16, 8, 8}, {-1}}, 0}, {{8, 8}, {4, 4}}, {256, 256}, "w");
            }),
            "Got 2 shard width entries for 3 sub-parameters of w.");
  EXPECT_EQ(msg([] {
              ds::sub_param_views({{{16, 8, 8}, {-1}}, 0}, {{8, 8}, {4, 4}, {4, 3}}, {256, 256}, "w");
            }),
            "Shard widths [4, 3] for a sub-parameter of w sum to 7, expected 8.");
  EXPECT_EQ(msg([] {
              ds::sub_param_views({{{16, 8, 8}, {-1}}, 0}, {{8, 8}, {4, 4}, {4}}, {256, 256}, "w");
            }),
            "Sub-parameter of size 8 in w has 1 shard widths, expected one per tp rank (2).");
  EXPECT_EQ(msg([] {
              ds::sub_param_views({{{16, 8, 8}, {-1}}, 0}, {{9, 7}, {4, 4}, {4, 4}}, {256, 256}, "w");
            }),
            "tp rank 0 of w holds 256 elements, but its recorded shard widths describe a shape of (17, 16).");
  EXPECT_EQ(msg([] {
              ds::sub_param_views({{{16}, {-1}, {-1}}, 0}, {{8, 8}}, {8, 8}, "w");
            }),
            "Sub-parameter shape [16, -1, -1] of w has 2 placeholder dimensions, so it cannot be resolved.");
  EXPECT_EQ(msg([] {
              ds::sub_param_views({{{16}, {-1}}, 0}, {{8, 8}}, {12, 12}, "w");
            }),
            "Sub-parameter shape [16, -1] of w cannot be resolved for a parameter with 24 elements.");
}

TEST(VocabCut, KeepsThePaddedStorage) {
  const auto v = ds::vocab_cut({40, 16}, 37, "emb");  // pp2_tp2_z1_patterns: 640-element storage, (37, 16)
  EXPECT_EQ(v.shape, (Shape{37, 16}));
  EXPECT_EQ(v.storage_numel, 640u);
  EXPECT_EQ(ds::vocab_cut({37, 16}, 37, "lm_head").shape, (Shape{37, 16}));  // AutoTP: nothing cut
  EXPECT_EQ(ds::vocab_cut({30, 16}, 37, "x").shape, (Shape{30, 16}));        // Python slices clamp
  EXPECT_EQ(ds::vocab_cut({40, 16}, -3, "x").shape, (Shape{37, 16}));        // and count from the end
  EXPECT_EQ(ds::vocab_cut({40, 16}, -50, "x").shape, (Shape{0, 16}));
  EXPECT_THROW(ds::vocab_cut({40}, 37, "bias"), FormatError);  // param[:V, :] on 1-D: IndexError
}

// Source files in memory: each rank's bytes are cut into extents at odd places and scattered
// over several "files" between filler bytes, as ZeRO-DP fragments are.
class MemFiles : public pt::ExtentReader {
 public:
  void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const override {
    ASSERT_LE(offset + n, files_.at(file).size());
    memcpy(buf, files_[file].data() + offset, n);
  }
  ds::RankBytes scatter(const std::string& bytes, std::mt19937_64& rng) {
    std::vector<pt::Extent> extents;
    for (size_t at = 0; at < bytes.size();) {
      const size_t len = std::min<size_t>(bytes.size() - at, 1 + rng() % 37);
      if (files_.empty() || rng() % 3 == 0) files_.emplace_back();
      std::string& f = files_.back();
      f.append(rng() % 5, '\xee');
      extents.push_back({uint32_t(files_.size() - 1), f.size(), len});
      f.append(bytes, at, len);
      at += len;
      if (rng() % 4 == 0) extents.push_back({uint32_t(files_.size() - 1), f.size(), 0});  // empty extent
    }
    return ds::RankBytes(std::move(extents));
  }

 private:
  std::vector<std::string> files_;
};

std::string read_computed(const pt::Computed& c, uint64_t offset, size_t n, const pt::ExtentReader& src) {
  std::string out(n, '\0');
  c.read(offset, out.data(), n, src);
  return out;
}

TEST(ConcatenatedTensor, ServesTheMergeAtAnyOffset) {
  std::mt19937_64 rng(7);
  const std::vector<std::pair<TpCat, std::vector<Shape>>> cats = {
      {TpCat::concat({{19, 16}, {18, 16}}, 0), {{19, 16}, {18, 16}}},
      {TpCat::concat({{5, 3, 7}, {5, 2, 7}, {5, 2, 7}}, 1), {{5, 3, 7}, {5, 2, 7}, {5, 2, 7}}},
      {TpCat::sub_params({{7, 5}, {6, 5}, {5, 5}}, 0, {{3, 2, 2}, {2, 2, 1}, {2, 2, 2}}), {{7, 5}, {6, 5}, {5, 5}}},
      {TpCat::two_sub_params({{5, 3}, {4, 3}}), {{5, 3}, {4, 3}}},
  };
  for (const auto& [cat, slices] : cats) {
    MemFiles files;
    std::vector<ds::RankBytes> ranks;
    for (uint32_t t = 0; t < slices.size(); ++t) {
      std::string bytes;
      for (uint32_t e = 0; e < numel(slices[t]); ++e) {
        const uint32_t v = (t << 24) | e;
        bytes.append(reinterpret_cast<const char*>(&v), 4);
      }
      ranks.push_back(files.scatter(bytes, rng));
    }
    const ds::ConcatenatedTensor merged(cat, std::move(ranks), pt::DType::F32, "p");
    std::string expected;
    for (uint64_t j = 0; j < cat.num_runs(); ++j)
      for (uint64_t k = 0; k < cat.run(j).count; ++k) {
        const uint32_t v = (cat.run(j).rank << 24) | uint32_t(cat.run(j).offset + k);
        expected.append(reinterpret_cast<const char*>(&v), 4);
      }
    ASSERT_EQ(merged.size(), expected.size());
    EXPECT_EQ(read_computed(merged, 0, expected.size(), files), expected);
    for (int k = 0; k < 300; ++k) {  // unaligned reads anywhere, of any length
      const uint64_t off = rng() % expected.size();
      const size_t n = size_t(rng() % (expected.size() - off + 1));
      EXPECT_EQ(read_computed(merged, off, n, files), expected.substr(off, n)) << off << "+" << n;
    }
  }
  MemFiles files;
  std::vector<ds::RankBytes> wrong;
  wrong.push_back(files.scatter(std::string(19 * 16 * 4, 'a'), rng));
  wrong.push_back(files.scatter(std::string(17 * 16 * 4, 'b'), rng));
  EXPECT_THROW(ds::ConcatenatedTensor(TpCat::concat({{19, 16}, {18, 16}}, 0), std::move(wrong), pt::DType::F32, "p"),
               FormatError);
}

// sum(slices) / len(slices) by torch 1.13 (torch.tensor(r, dtype=torch.float32) per rank), as
// uint32 bits, generated once with /usr/bin/python3 at authoring time. Values include -0.0 (the
// int start of sum() makes it +0.0), subnormals, a cancellation (1e8 + 1 - 1e8 ...) and
// 2^24 + 1 + 1 where the left-to-right fp32 order decides the result, and an overflow to inf.
// The generator also checked that numpy's left-to-right ((0 + L0) + L1 + ...) / T gives the same bits.
struct AverageCase {
  int T;
  std::vector<std::vector<uint32_t>> ranks;
  std::vector<uint32_t> expected;
};
const std::vector<AverageCase> kAverageCases = {
    {1,
     {{0x80000000, 0x00000001, 0x4cbebc20, 0x4b800000, 0x80000000, 0x7f7fc99e, 0x321fdb22, 0x31927d16,
       0xbd8c13f7, 0xb8caa28b, 0x4432abd3, 0xc2503a55, 0xc286ae4e, 0xbee0af32, 0xbb4c06d9, 0x4295d024,
       0xcc530928, 0xc81b565c, 0x4acfeece, 0xc4528536, 0xc1423b6f, 0x4952112c, 0xb44bcb98, 0xaf5642e3}},
     {0x00000000, 0x00000001, 0x4cbebc20, 0x4b800000, 0x00000000, 0x7f7fc99e, 0x321fdb22, 0x31927d16,
      0xbd8c13f7, 0xb8caa28b, 0x4432abd3, 0xc2503a55, 0xc286ae4e, 0xbee0af32, 0xbb4c06d9, 0x4295d024,
      0xcc530928, 0xc81b565c, 0x4acfeece, 0xc4528536, 0xc1423b6f, 0x4952112c, 0xb44bcb98, 0xaf5642e3}},
    {2,
     {{0x80000000, 0x00000001, 0x4cbebc20, 0x4b800000, 0x80000000, 0x7f7fc99e, 0xba1f8908, 0x311cbf34,
       0xca823d12, 0xb6e9bf41, 0x45f4e546, 0xc95cfcfb, 0x40905af1, 0xcb965c74, 0xcc4c2fc7, 0xbcef8822,
       0xb9c71ba2, 0x4281f91c, 0xca0a1257, 0xc89ffba4, 0x3f104be7, 0xb509300b, 0x455c7d45, 0xbe7da5f6},
      {0x80000000, 0x00000001, 0x3f800000, 0x3f800000, 0x00000000, 0x7f7fc99e, 0x3565c58e, 0xb336c88b,
       0xb2297a12, 0x3a690bb6, 0x4ac50382, 0x4ae359bc, 0xb3c44250, 0xb35b5b5c, 0x4807e67a, 0xc902f806,
       0x3ec50bb1, 0x3174ff64, 0xc60a9f3f, 0xb2641157, 0x4017c005, 0x3ff45cff, 0x30853875, 0x45bbf0a3}},
     {0x00000000, 0x00000001, 0x4c3ebc20, 0x4b000000, 0x00000000, 0x7f800000, 0xb99f4f97, 0xb2acfc98,
      0xca023d12, 0x39e73837, 0x4a4540bb, 0x4a47ba1d, 0x40105af1, 0xcb165c74, 0xcbcba7e1, 0xc882f806,
      0x3e44d9ea, 0x4201f91c, 0xc98a9cf6, 0xc81ffba4, 0x3fbbd2ff, 0x3f745cfb, 0x44dc7d45, 0x453beea8}},
    {3,
     {{0x80000000, 0x00000001, 0x4cbebc20, 0x4b800000, 0x80000000, 0x7f7fc99e, 0xc4727b25, 0x4bb1b223,
       0xbf7e8e7f, 0xcc3f2ae6, 0xbd0a7108, 0x42138731, 0xaf31750a, 0x3cabcdb4, 0xb3096883, 0x4c8786aa,
       0x369995ee, 0x46183df7, 0xb80a9288, 0xc2037ce7, 0xca3ee972, 0x35c11a98, 0xb111c6c5, 0xb8a7ab97},
      {0x80000000, 0x00000001, 0x3f800000, 0x3f800000, 0x00000000, 0x7f7fc99e, 0x48cb747f, 0x3bddd63e,
       0x417c3b6f, 0xbcd6fd20, 0x4cb72b59, 0x4bc4601e, 0x39ea5d96, 0x428433bb, 0xc5fce736, 0xc2bc92e9,
       0xbf3d7b58, 0xb995cf11, 0xbc100a68, 0xbf4d2cf7, 0xb51e4a29, 0x490fa6c5, 0x3be7685a, 0xb318cd9e},
      {0x80000000, 0x00000002, 0xccbebc20, 0x3f800000, 0x80000000, 0x7f7fc99e, 0xbcd7c295, 0xb927fd49,
       0xb7d64494, 0x46c88e4d, 0x49729aaf, 0xb8874e5b, 0xc6531d3f, 0xc8dcaec2, 0x3dc32632, 0x3162e8fe,
       0xc4706673, 0x3a513b06, 0xb220168f, 0x485abee3, 0xc12ffefe, 0xc7bf3d8b, 0x3e45d7ab, 0xc856265e}},
     {0x00000000, 0x00000001, 0x00000000, 0x4aaaaaab, 0x00000000, 0x7f800000, 0x4807522b, 0x4aeced84,
      0x409d8c48, 0xcb7ec270, 0x4bf6c0bd, 0x4b02eacb, 0xc58cbe2a, 0xc81319a9, 0xc52899a2, 0x4bb4b37d,
      0xc3a063e1, 0x454afd4b, 0xbb40c6b1, 0x4791cefb, 0xc97e8cd3, 0x481fa96f, 0x3d88b749, 0xc78ec43f}},
    {8,
     {{0x80000000, 0x00000001, 0x4cbebc20, 0x4b800000, 0x80000000, 0x7f7fc99e, 0xcb90a3b7, 0x3a07a8a6,
       0x42072236, 0xc9739273, 0xc8a5a268, 0x39d05f67, 0x3a366b88, 0x4c46c7a4, 0xb60728e7, 0x421c53d0,
       0xc8ac7a59, 0xbefbd4ee, 0x3706b2cf, 0xbd209444, 0xbeeb97f2, 0x38b0ff1c, 0xcb1b04b1, 0xb859bbd9},
      {0x80000000, 0x00000001, 0x3f800000, 0x3f800000, 0x00000000, 0x7f7fc99e, 0xca6119e3, 0x3dcad61f,
       0x45b6b7d2, 0x3dc4bd17, 0x46b3b85c, 0x4a752b77, 0x453a7c54, 0x4a9427e8, 0x425af4f9, 0x4417c1d2,
       0x4615f87d, 0xc20913e3, 0xb8a941fc, 0xba4068c7, 0x34173c4b, 0xcc74fa4c, 0x3ecef1b6, 0xcaadcb50},
      {0x80000000, 0x00000002, 0xccbebc20, 0x3f800000, 0x80000000, 0x7f7fc99e, 0xca980277, 0x3d909b94,
       0x4ad099be, 0x3a64ce60, 0x3bf5e158, 0x42b3b698, 0x32d288a2, 0xb34cf1e4, 0xc40ad641, 0x428af978,
       0x407f1ef2, 0xc70ac978, 0x4542fae8, 0x4a98e383, 0x3d9e991c, 0xb431a19f, 0x39b40f3a, 0xb5aab044},
      {0x80000000, 0x00000003, 0x40400000, 0x3f800000, 0x00000000, 0x7f7fc99e, 0xb56b144f, 0xc60e6647,
       0x473fd546, 0xbb38a4cd, 0x339abef5, 0x33bd4701, 0xbe9befcf, 0x4c92353b, 0xccac578a, 0xb221c6f9,
       0x49d09764, 0xb869ac22, 0x4c0a4077, 0x3cc571be, 0x3d703365, 0x47bc118a, 0x4ad45b22, 0xba6d1661},
      {0x80000000, 0x00000004, 0x3f000000, 0x3f800000, 0x80000000, 0x7f7fc99e, 0xc0031e6a, 0x42b6c0b7,
       0x36abe10a, 0x389e2cc0, 0x2fc14031, 0xc8fa169b, 0xc5df2c3c, 0xb4eab3d2, 0x451bd9c9, 0x3dc66c7f,
       0x3310ddf2, 0x43e79433, 0xbbd8a7ec, 0x37147f65, 0xb9d51210, 0xc0a6c8d8, 0xb75fb5ec, 0x3c58aebc},
      {0x80000000, 0x00000004, 0xbf800000, 0x3f800000, 0x00000000, 0x7f7fc99e, 0x382418ec, 0x315e608b,
       0x447965c5, 0xc9b41d99, 0xb9aea4c5, 0x43932331, 0x3376ecd2, 0x48dd1a6b, 0xcb078a53, 0x39a6b6ab,
       0x45ae2e67, 0x48b819c5, 0x460de5a6, 0x43b0fae6, 0xb7cbf226, 0xbd368b7b, 0x361aed1f, 0xc606c7f5},
      {0x80000000, 0x00000005, 0x40e00000, 0x3f800000, 0x80000000, 0x7f7fc99e, 0xb51c15a5, 0xbab081a5,
       0xc60eb506, 0x47134825, 0x4617fb10, 0xb225a19d, 0x3853e5fc, 0xb70b0f1e, 0x4b1435da, 0x3a791857,
       0x47035f5c, 0x333574c3, 0x3717fb59, 0xb11a4860, 0xc0ee06ce, 0xc07e4784, 0xc8af4a0c, 0x4c80355f},
      {0x80000000, 0x00000006, 0x3a83126f, 0x3f800000, 0x00000000, 0x7f7fc99e, 0xb5084a65, 0x40b4f784,
       0xca186c3b, 0x3e87fae2, 0x3f1011f2, 0xbf908dfb, 0xc40c2850, 0xbcc28adb, 0xbe44eab8, 0xbc0a94d9,
       0x357bbf27, 0xb2ec0e92, 0x4bf0b530, 0xc0aab79b, 0xba7c1b17, 0x38546fcf, 0xc2afc7b9, 0x425635d1}},
     {0x00000000, 0x00000003, 0x3f980419, 0x4a000000, 0x00000000, 0x7f800000, 0xca52c792, 0xc48ce17a,
      0x4905d1ae, 0xc894a647, 0xc715a6f8, 0x48d5ee9f, 0xc413758a, 0x4b7fb8a6, 0xcb2ac120, 0x42b2ebfb,
      0x482b6e08, 0x4726f623, 0x4b01537c, 0x4918e63c, 0xbf7870ea, 0xcaf49c45, 0xc8d94722, 0x4aeaa8f5}},
};

std::vector<float> floats(const std::vector<uint32_t>& bits) {
  std::vector<float> f(bits.size());
  memcpy(f.data(), bits.data(), bits.size() * 4);
  return f;
}

std::vector<uint32_t> bits_of(const std::vector<float>& f) {
  std::vector<uint32_t> b(f.size());
  memcpy(b.data(), f.data(), f.size() * 4);
  return b;
}

TEST(Average, BitExactWithTorch) {
  bool order_matters = false;
  for (const auto& c : kAverageCases) {
    SCOPED_TRACE("T = " + std::to_string(c.T));
    std::vector<std::vector<float>> ranks;
    std::vector<const float*> ptrs;
    for (const auto& r : c.ranks) ranks.push_back(floats(r));
    for (const auto& r : ranks) ptrs.push_back(r.data());
    std::vector<float> out(c.expected.size());
    ds::average_f32(ptrs, out.size(), out.data());
    EXPECT_EQ(bits_of(out), c.expected);
    // The data can tell orders apart: summing right to left gives other bits somewhere.
    for (size_t i = 0; i < out.size(); ++i) {
      float acc = 0.0f;
      for (size_t t = ranks.size(); t-- > 0;) acc = acc + ranks[t][i];
      order_matters = order_matters || bits_of({acc / float(c.T)})[0] != c.expected[i];
    }
    // Served through extents at unaligned offsets.
    std::mt19937_64 rng(3);
    MemFiles files;
    std::vector<ds::RankBytes> rb;
    for (const auto& r : ranks)
      rb.push_back(files.scatter(std::string(reinterpret_cast<const char*>(r.data()), r.size() * 4), rng));
    const ds::AveragedTensor avg(std::move(rb), pt::DType::F32, "avg");
    const std::string want(reinterpret_cast<const char*>(c.expected.data()), c.expected.size() * 4);
    ASSERT_EQ(avg.size(), want.size());
    for (uint64_t off = 0; off < want.size(); off += 5)
      for (size_t n : {size_t(1), size_t(3), size_t(9), want.size() - off})
        EXPECT_EQ(read_computed(avg, off, std::min(n, want.size() - off), files), want.substr(off, n)) << off;
  }
  EXPECT_TRUE(order_matters);
}

TEST(Average, RefusesUnequalOrNonFp32Slices) {
  std::mt19937_64 rng(1);
  MemFiles files;
  auto two = [&](size_t a, size_t b) {
    std::vector<ds::RankBytes> v;
    v.push_back(files.scatter(std::string(a, '\0'), rng));
    v.push_back(files.scatter(std::string(b, '\0'), rng));
    return v;
  };
  EXPECT_THROW(ds::AveragedTensor(two(16, 12), pt::DType::F32, "x"), FormatError);
  EXPECT_THROW(ds::AveragedTensor(two(16, 16), pt::DType::BF16, "x"), FormatError);
  EXPECT_NO_THROW(ds::AveragedTensor(two(16, 16), pt::DType::F32, "x"));
}

TEST(Replicated, ServesRankZeroAndRefusesDivergentCopies) {
  std::mt19937_64 rng(2);
  MemFiles files;
  const std::vector<float> a = {1.0f, -0.0f, 3.5f, 7.0f}, same = {1.0f, 0.0f, 3.5f, 7.0f},
                           other = {1.0f, 0.0f, 3.5f, 7.5f};
  auto bytes = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  std::vector<ds::RankBytes> ok, bad;
  ok.push_back(files.scatter(bytes(a), rng));
  ok.push_back(files.scatter(bytes(same), rng));  // -0.0 == 0.0 for torch.equal
  bad.push_back(files.scatter(bytes(a), rng));
  bad.push_back(files.scatter(bytes(other), rng));
  const ds::ReplicatedTensor r(std::move(ok), pt::DType::F32, "norm.weight");
  EXPECT_EQ(read_computed(r, 0, 16, files), bytes(a));
  const ds::ReplicatedTensor d(std::move(bad), pt::DType::F32, "norm.weight");
  EXPECT_EQ(read_computed(d, 0, 12, files), bytes(a).substr(0, 12));  // the differing element is not read
  EXPECT_THROW(read_computed(d, 13, 2, files), Error);
}

// One TP rank's local tensor of a parameter in a ZeRO-1/2 checkpoint, read with our pt reader as
// src/ds/index_zero12.cpp does: the shape from mp_rank_<t>'s param_shapes, the bytes from each DP
// rank's flat partition at param_slice_mappings' fragment address, in DP order.
struct RankSlice {
  Shape shape;
  std::vector<pt::Extent> extents;
};

RankSlice rank_slice(const std::string& tag, int t, int D, const std::string& name, const std::string& state,
                     std::vector<std::string>& paths) {
  RankSlice s;
  char mp[8];
  snprintf(mp, sizeof mp, "%02d", t);
  const std::string model_path = tag + "/mp_rank_" + mp + "_model_states.pt";
  auto model = pt::load_pt(model_path);
  const ds::Field shapes = ds::Field(model->root, model_path)["param_shapes"];
  for (size_t g = 0; g < shapes.size(); ++g)
    if (auto f = shapes[g].find(name)) s.shape = f->as_shape();
  for (int d = 0; d < D; ++d) {
    paths.push_back(tag + "/zero_pp_rank_" + std::to_string(d) + "_mp_rank_" + mp + "_optim_states.pt");
    auto optim = pt::load_pt(paths.back());
    const ds::Field osd = ds::Field(optim->root, paths.back())["optimizer_state_dict"];
    const ds::Field maps = osd["param_slice_mappings"];
    for (size_t g = 0; g < maps.size(); ++g) {
      auto fa = maps[g].find(name);
      if (!fa) continue;
      const pt::Tensor& flat = state == "fp32" ? osd["single_partition_of_fp32_groups"][g].as_tensor()
                                               : osd["base_optimizer_state"]["state"].at(int64_t(g))[state].as_tensor();
      const auto start = uint64_t(fa->attr("start").as_int()), n = uint64_t(fa->attr("numel").as_int());
      s.extents.push_back({uint32_t(paths.size() - 1), flat.byte_offset() + start * 4, n * 4});
    }
  }
  return s;
}

enum class Rule { Replicated, Average, TwoSubParams, SubParams, Row, Column };
struct FixtureParam {
  std::string fixture;
  int D;
  std::string name;
  Rule rule;
  ds::SubParamShape sub = {};
  std::vector<std::vector<int64_t>> widths = {};
};

// The rule chosen by hand from each fixture's meta/verify.txt; the universal_checkpoint_info
// plumbing that picks it is the index's job, not this test's.
TEST(TpMergeFixture, EqualsDsToUniversal) {
  const std::vector<FixtureParam> params = {
      {"tp2_dp1_z1", 1, "layers.0.mlp.down_proj.weight", Rule::Row},
      {"tp2_dp1_z1", 1, "layers.0.self_attn.o_proj.weight", Rule::Row},
      {"tp2_dp1_z1", 1, "layers.0.self_attn.q_proj.weight", Rule::Column},
      {"tp2_dp1_z1", 1, "layers.0.mlp.up_proj.bias", Rule::Column},
      {"tp2_dp1_z1", 1, "lm_head.weight", Rule::Column},  // vocabulary, 19 + 18 rows, nothing cut
      {"tp2_dp1_z1", 1, "norm.weight", Rule::Replicated},
      {"tp2_dp2_z2", 2, "layers.0.mlp.down_proj.weight", Rule::Row},
      {"tp2_dp2_z2", 2, "lm_head.weight", Rule::Column},
      {"tp2_dp2_z2", 2, "embed_tokens.weight", Rule::Replicated},
      {"tp2_dp1_z1_avg", 1, "language_model.encoder.final_layernorm.weight", Rule::Average},
      {"tp2_dp1_z1_avg", 1, "language_model.encoder.layers.0.input_layernorm.bias", Rule::Average},
      {"tp2_dp1_z1_avg", 1, "language_model.encoder.layers.1.self_attention.dense.bias", Rule::Average},
      {"tp2_dp1_z1_avg", 1, "language_model.embedding.word_embeddings.weight", Rule::Column},  // 40 rows, cut to 37
      {"tp2_dp1_z1_swiglu", 1, "language_model.encoder.layers.0.mlp.dense_h_to_4h.weight", Rule::TwoSubParams},
      {"tp2_dp1_z1_swiglu", 1, "language_model.encoder.layers.1.mlp.dense_h_to_4h.bias", Rule::TwoSubParams},
      {"tp2_dp1_z1_fused",
       1,
       "layers.0.self_attn.qkv_proj.weight",
       Rule::SubParams,
       {{{16, 8, 8}, {-1}}, 0},
       {{8, 8}, {4, 4}, {4, 4}}},
      {"tp2_dp1_z1_fused",
       1,
       "layers.0.self_attn.qkv_proj.bias",
       Rule::SubParams,
       {{{16, 8, 8}}, 0},
       {{8, 8}, {4, 4}, {4, 4}}},
      {"tp2_dp1_z1_fused",
       1,
       "layers.0.mlp.gate_up_proj.weight",
       Rule::SubParams,
       {{{24, 24}, {-1}}, 0},
       {{12, 12}, {12, 12}}},
  };
  for (const auto& p : params)
    for (const std::string state : {"fp32", "exp_avg", "exp_avg_sq"}) {
      SCOPED_TRACE(p.fixture + " " + p.name + " " + state);
      const std::string dir = kFixtures + "/" + p.fixture;
      std::vector<std::string> paths;
      std::vector<Shape> shapes;
      std::vector<ds::RankBytes> ranks;
      std::vector<uint64_t> numels;
      for (int t = 0; t < 2; ++t) {
        RankSlice s = rank_slice(dir + "/checkpoint/global_step2", t, p.D, p.name, state, paths);
        ASSERT_FALSE(s.shape.empty());
        shapes.push_back(s.shape);
        numels.push_back(numel(s.shape));
        ranks.emplace_back(std::move(s.extents));
      }
      std::unique_ptr<pt::Computed> merged;
      Shape shape = shapes[0];
      switch (p.rule) {
        case Rule::Replicated:
          merged = std::make_unique<ds::ReplicatedTensor>(std::move(ranks), pt::DType::F32, p.name);
          break;
        case Rule::Average:
          merged = std::make_unique<ds::AveragedTensor>(std::move(ranks), pt::DType::F32, p.name);
          break;
        default: {
          const TpCat cat = p.rule == Rule::Row      ? TpCat::concat(shapes, 1)
                            : p.rule == Rule::Column ? TpCat::concat(shapes, 0)
                            : p.rule == Rule::TwoSubParams
                                ? TpCat::two_sub_params(shapes)
                                : TpCat::sub_params(ds::sub_param_views(p.sub, p.widths, numels, p.name),
                                                    p.sub.partition_dim, p.widths);
          shape = cat.shape();
          merged = std::make_unique<ds::ConcatenatedTensor>(cat, std::move(ranks), pt::DType::F32, p.name);
        }
      }
      const PathSource files(paths);
      const std::string ours = read_computed(*merged, 0, merged->size(), files);
      auto ref = pt::load_pt(dir + "/ds_to_universal/global_step2_universal/zero/" + p.name + "/" + state + ".pt");
      const pt::Tensor& t = *ref->root->get("param")->tensor;
      if (p.name.find("word_embeddings") != std::string::npos) {
        // Vocabulary: the saved view is (37, 16) over the whole padded merge (§10.3).
        const ds::VocabCut v = ds::vocab_cut(shape, 37, p.name);
        EXPECT_EQ(t.shape, v.shape);
        EXPECT_EQ(t.storage_numel, v.storage_numel);
        EXPECT_EQ(ref->file.read_string(t.record_offset, t.storage_numel * 4, "storage"), ours);
        continue;
      }
      EXPECT_EQ(t.shape, shape);
      EXPECT_EQ(tensor_bytes(*ref, t), ours);
    }
}

}  // namespace
}  // namespace zm::test
