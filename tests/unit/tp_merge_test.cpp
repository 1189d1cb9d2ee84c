// The tensor-parallel merge arithmetic against independent references: a brute-force merge built
// element by element from each rule's definition, Python + torch bits for the average, and
// DeepSpeed's own ds_to_universal.py output for real AutoTP fixtures.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

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

// sum(slices) / len(slices) by torch 1.13, as uint32 bits: tests/unit/data/tp_average_cases.txt
// says how they were made and what they hold.
struct AverageCase {
  int T;
  std::vector<std::vector<uint32_t>> ranks;
  std::vector<uint32_t> expected;
};

std::vector<uint32_t> hex_words(std::istringstream& line) {
  std::vector<uint32_t> v;
  for (std::string w; line >> w;) v.push_back(uint32_t(std::stoul(w, nullptr, 16)));
  return v;
}

std::vector<AverageCase> average_cases() {
  std::ifstream in(ZM_UNIT_DATA "/tp_average_cases.txt");
  if (!in) throw std::runtime_error("cannot read tp_average_cases.txt");
  std::vector<AverageCase> cases;
  for (std::string text; std::getline(in, text);) {
    std::istringstream line(text);
    std::string key;
    if (!(line >> key) || key[0] == '#') continue;
    if (key == "T") {
      cases.emplace_back();
      line >> cases.back().T;
    } else if (key == "rank") {
      cases.at(cases.size() - 1).ranks.push_back(hex_words(line));
    } else if (key == "expected") {
      cases.at(cases.size() - 1).expected = hex_words(line);
    }
  }
  return cases;
}

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
  const std::vector<AverageCase> cases = average_cases();
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& c : cases) {
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
        EXPECT_EQ(t.record().numel, v.storage_numel);
        EXPECT_EQ(ref->file.read_string(t.record().offset, t.record().numel * 4, "storage"), ours);
        continue;
      }
      EXPECT_EQ(t.shape, shape);
      EXPECT_EQ(tensor_bytes(*ref, t), ours);
    }
}

}  // namespace
}  // namespace zm::test
