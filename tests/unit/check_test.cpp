// verify and diff (issue 42): every check passes on the real fixtures and fails on a crafted copy
// of one: a flipped byte in a zip record, a zeroed exp_avg, a NaN, a step that disagrees, a 16-bit
// module that is not its masters, a truncated shard, a missing and a renamed key, an expert reset.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "zeromount/check/diff.h"
#include "zeromount/check/input.h"
#include "zeromount/check/verify.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/crc32.h"
#include "zeromount/pt/dcp.h"
#include "zeromount/pt/dcp_read.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::check {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kAllFixtures = {"z1_ws2_fp32_pg2",       "z2_ws2_fp32_pg2",         "z3_ws2_fp32_pg2",
                                               "z3_ws2_fp32_pg2_sg200", "z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2",
                                               "z3_ws2_bf16_pg2",       "z2_ws2_fp16_pg2"};
const std::vector<std::string> kDcpFixtures = {"fsdp2_ws2_fp32", "fsdp2_ws3_fp32", "fsdp2_ws2_bf16mixed",
                                               "torchtitan_ws2_fp32", "fsdp2_ws2_model_only"};

void patch(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, bytes, n, off_t(offset)), ssize_t(n));
  ::close(fd);
}

// Recomputes every record's CRC-32 into the central directory (what the check compares), so that
// a crafted change is found by the number checks alone.
void fix_crcs(const std::string& path) {
  pt::File f(path);
  pt::ZipReader zip(f);
  for (const auto& e : zip.entries()) {
    std::string data(e.compressed_size, '\0');
    f.read_exact(zip.data_offset(e), data.data(), data.size(), "record");
    const uint32_t crc = pt::crc32(data.data(), data.size());
    patch(path, e.central_header + 16, &crc, 4);
  }
}

bool found(const Findings& f, const std::string& check, Severity s) {
  for (const auto& x : f.findings)
    if (x.check == check && x.severity == s) return true;
  return false;
}

// A copy of fixture `name`'s checkpoint, its tag folder, and the tag's index.
struct Crafted {
  std::string root, tag;
  std::unique_ptr<ds::TagIndex> ix;
  explicit Crafted(const std::string& name) {
    root = test::temp_dir() + "/ckpt";
    test::copy_fixture(name + "/checkpoint", root);
    tag = root + "/global_step3";
    ix = ds::index_tag(tag);
  }
  const ds::Param& param(size_t k = 0) const { return ix->params.at(k); }
  size_t state(const std::string& s) const {
    return size_t(std::find(ix->state_names.begin(), ix->state_names.end(), s) - ix->state_names.begin());
  }
  const std::string& shard(const pt::Extent& e) const { return ix->shards.at(e.file).path; }
};

TEST(Verify, EveryDeepSpeedFixturePasses) {
  for (const auto& name : kAllFixtures) {
    const Findings f = verify(test::kFixtures + "/" + name + "/checkpoint");
    EXPECT_EQ(f.exit_code(), 0) << text(f);
    for (const char* c : {"files-open", "zip-crc", "ds-index", "ds-fragments", "latest", "finite", "step-agrees"})
      EXPECT_NE(std::find(f.checks.begin(), f.checks.end(), c), f.checks.end()) << name << " ran no " << c;
  }
}

TEST(Verify, EveryDcpFixturePasses) {
  for (const auto& name : kDcpFixtures) {
    const std::string dir = test::kFixtures + "/dcp/" + name + "/checkpoint";
    for (const auto& e : fs::directory_iterator(dir)) {
      const Findings f = verify(e.path().string());
      EXPECT_EQ(f.exit_code(), 0) << text(f);
      EXPECT_NE(std::find(f.checks.begin(), f.checks.end(), "dcp-chunks"), f.checks.end()) << text(f);
    }
  }
}

TEST(Verify, ConverterOutputsPass) {
  for (const auto& name : test::kFixtureNames) {
    for (const char* what :
         {"/ds_to_universal", "/zero_to_fp32/model.safetensors", "/zero_to_fp32/pytorch_model.bin"}) {
      const Findings f = verify(test::kFixtures + "/" + name + what);
      EXPECT_EQ(f.exit_code(), 0) << text(f);
    }
  }
}

TEST(Verify, FlippedByteInARecordFailsItsCrc) {
  Crafted c("z2_ws2_fp32_pg2");
  const auto frags = c.ix->fragments(c.param(), 0);
  const uint64_t at = frags[0].extent.offset + 5;
  char b = 0;
  pt::File(c.shard(frags[0].extent)).read_exact(at, &b, 1, "byte");
  b ^= 0x10;
  patch(c.shard(frags[0].extent), at, &b, 1);
  const Findings f = verify(c.root);
  EXPECT_TRUE(found(f, "zip-crc", Severity::Fail)) << text(f);
  EXPECT_EQ(f.exit_code(), 2);
}

// The carry-less multiply CRC and the tables against the definition, at every length up to a few
// folds and every alignment, and a CRC combined from two pieces (what the pass does with the parts
// of a record it reads out of order).
TEST(Crc32, CarrylessTablesAndCombineAgreeWithTheDefinition) {
  const auto bitwise = [](const unsigned char* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
  };
  std::vector<unsigned char> b(5000);
  uint32_t x = 12345;
  for (auto& c : b) c = uint8_t((x = x * 1103515245u + 12345u) >> 16);
  EXPECT_EQ(pt::crc32("123456789", 9), 0xCBF43926u);  // the check value of CRC-32/ISO-HDLC
  for (size_t align = 0; align < 16; ++align)
    for (size_t n = 0; n < 700; n += (n < 200 ? 1 : 7)) {
      const uint32_t want = bitwise(b.data() + align, n);
      ASSERT_EQ(pt::crc32(b.data() + align, n), want) << n << " bytes at " << align;
      const size_t cut = n / 3;
      ASSERT_EQ(
          pt::crc32_combine(pt::crc32(b.data() + align, cut), pt::crc32(b.data() + align + cut, n - cut), n - cut),
          want)
          << n << " cut at " << cut;
      ASSERT_EQ(pt::crc32(b.data() + align + cut, n - cut, pt::crc32(b.data() + align, cut)), want);
    }
  EXPECT_EQ(pt::crc32(b.data(), b.size()), bitwise(b.data(), b.size()));
}

// A record that no tensor is read from (the archive's version) is still read and compared, and
// the pass reads each byte of the tag once: no more than its files hold.
TEST(Verify, FlippedByteOutsideEveryTensorFailsItsCrcAndEachByteIsReadOnce) {
  Crafted c("z2_ws2_fp32_pg2");
  const Findings clean = verify(c.root);
  uint64_t files = 0;
  for (const auto& e : fs::directory_iterator(c.tag)) files += e.file_size();
  EXPECT_GT(clean.bytes_read, 0u);
  EXPECT_LE(clean.bytes_read, files) << "a byte read twice";
  const std::string shard = c.ix->shards.at(0).path;
  pt::File file(shard);
  pt::ZipReader zip(file);
  const pt::ZipEntry* version = nullptr;
  for (const auto& e : zip.entries())
    if (e.name.ends_with("/version") && e.compressed_size) version = &e;
  ASSERT_NE(version, nullptr) << shard;
  const uint64_t at = zip.data_offset(*version);
  char byte = 0;
  file.read_exact(at, &byte, 1, "byte");
  byte ^= 0x04;
  patch(shard, at, &byte, 1);
  const Findings f = verify(c.root);
  EXPECT_TRUE(found(f, "zip-crc", Severity::Fail)) << text(f);
  EXPECT_NE(text(f).find("version"), std::string::npos) << text(f);
}

TEST(Verify, ZeroedExpAvgLooksReset) {
  for (const char* name : {"z2_ws2_fp32_pg2", "z3_ws2_fp32_pg2"}) {
    Crafted c(name);
    for (const auto& fr : c.ix->fragments(c.param(1), c.state("exp_avg"))) {
      const std::string zeros(fr.extent.length, '\0');
      patch(c.shard(fr.extent), fr.extent.offset, zeros.data(), zeros.size());
      fix_crcs(c.shard(fr.extent));
    }
    const Findings f = verify(c.root);
    EXPECT_TRUE(found(f, "moments-not-reset", Severity::Warn)) << text(f);
    EXPECT_FALSE(found(f, "zip-crc", Severity::Fail)) << text(f);
    EXPECT_EQ(f.exit_code(), 1) << text(f);
  }
}

TEST(Verify, NaNIsFoundWithItsFirstIndex) {
  Crafted c("z2_ws2_bf16_pg2");
  const ds::Param& p = c.param(0);
  const auto frags = c.ix->fragments(p, c.state("exp_avg_sq"));
  const float nan = NAN, neg = -1;
  // Element 7 of the flat state, and a negative second moment at element 3.
  patch(c.shard(frags[0].extent), frags[0].extent.offset + 7 * 4, &nan, 4);
  patch(c.shard(frags[0].extent), frags[0].extent.offset + 3 * 4, &neg, 4);
  fix_crcs(c.shard(frags[0].extent));
  const Findings f = verify(c.root);
  EXPECT_TRUE(found(f, "finite", Severity::Fail)) << text(f);
  EXPECT_TRUE(found(f, "exp_avg_sq-nonnegative", Severity::Fail)) << text(f);
  const std::string t = text(f);
  std::string want = "first at [";
  EXPECT_NE(t.find(want), std::string::npos) << t;
  EXPECT_EQ(f.exit_code(), 2);
}

TEST(Verify, StepThatDisagreesAcrossRanks) {
  Crafted c("z1_ws2_fp32_pg2");
  const std::string rank1 = c.tag + "/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  auto pt = pt::load_pt(rank1);
  // The 'step' tensors of rank 1's groups: the first one becomes 4.
  const pt::Node* groups = pt->root->get("optimizer_state_dict")->get("base_optimizer_state")->get("state");
  ASSERT_TRUE(groups) << "fixture layout changed";
  const pt::Node* step = groups->entries.at(0).second->get("step");
  ASSERT_TRUE(step && step->is(pt::Kind::Tensor));
  const float four = 4;
  patch(rank1, step->tensor->byte_offset(), &four, 4);
  fix_crcs(rank1);
  const Findings f = verify(c.root);
  EXPECT_TRUE(found(f, "step-agrees", Severity::Fail)) << text(f);
}

TEST(Verify, StaleModuleIsNotItsMastersRounded) {
  for (const char* name : {"z2_ws2_bf16_pg2", "z2_ws2_fp32_pg2"}) {
    Crafted c(name);
    const ds::PlainTensor& m = c.ix->module_weights.at(2);
    const pt::Extent e = m.data.at(0);
    std::string bytes(pt::element_size(m.dtype), '\0');
    pt::File(c.ix->shards.at(e.file).path).read_exact(e.offset, bytes.data(), bytes.size(), "module");
    bytes.back() ^= 0x01;  // a sign flip of the first element: far from any rounding
    bytes.back() ^= char(0x80);
    patch(c.ix->shards.at(e.file).path, e.offset, bytes.data(), bytes.size());
    fix_crcs(c.ix->shards.at(e.file).path);
    const Findings f = verify(c.root);
    EXPECT_TRUE(found(f, "module-matches-masters", Severity::Fail)) << text(f);
  }
}

TEST(Verify, TruncatedShardFails) {
  Crafted c("z3_ws2_fp32_pg2");
  const std::string rank1 = c.tag + "/zero_pp_rank_1_mp_rank_00_optim_states.pt";
  fs::resize_file(rank1, fs::file_size(rank1) - 100);
  const Findings f = verify(c.root);
  EXPECT_TRUE(found(f, "files-open", Severity::Fail)) << text(f);
  EXPECT_TRUE(found(f, "ds-index", Severity::Fail)) << text(f);
  EXPECT_TRUE(found(f, "latest", Severity::Fail)) << text(f);
  EXPECT_EQ(f.exit_code(), 2);
}

TEST(Verify, LatestNamingAMissingTagFails) {
  Crafted c("z1_ws2_fp32_pg2");
  test::write_file(c.root + "/latest", "global_step9");
  const Findings f = verify(c.root, "global_step3");
  EXPECT_TRUE(found(f, "latest", Severity::Fail)) << text(f);
}

TEST(Verify, TruncatedSafetensorsFailsItsLayout) {
  const std::string dir = test::temp_dir();
  test::copy_fixture("z2_ws2_fp32_pg2/zero_to_fp32/model.safetensors", dir + "/model.safetensors");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 8);
  const Findings f = verify(dir);
  EXPECT_TRUE(found(f, "safetensors-layout", Severity::Fail)) << text(f);
}

// A crafted `.metadata` (the fixture's own, re-written with pt::dcp::metadata) whose second chunk
// of a row-split tensor starts a row earlier and is a row longer (the chunks overlap), or a row
// later and a row shorter (they leave a hole): dcp-chunks fails, naming the key and what is wrong.
TEST(Verify, DcpChunksThatOverlapOrLeaveAHoleFail) {
  for (const int64_t shift : {-1, 1}) {
    SCOPED_TRACE(shift < 0 ? "overlap" : "hole");
    const std::string dir = test::temp_dir() + "/step-3";
    test::copy_fixture("dcp/fsdp2_ws2_fp32/checkpoint/step-3", dir);
    const auto md = pt::dcp::read_metadata(pt::File(dir + "/.metadata"));
    std::vector<std::string> files;
    std::vector<pt::dcp::Item> items;
    std::string moved;
    for (const auto& k : md.keys) {
      pt::dcp::Item it{k.fqn, k.path, k.tensor, k.dtype, k.size, {}};
      for (const auto& c : k.chunks) {
        auto at = std::find(files.begin(), files.end(), c.storage.relative_path);
        if (at == files.end()) at = files.insert(files.end(), c.storage.relative_path);
        it.chunks.push_back({c.offsets, c.sizes, uint32_t(at - files.begin()), c.storage.offset, c.storage.length});
      }
      if (moved.empty() && k.tensor && k.size.size() == 2 && it.chunks.size() == 2 && it.chunks[1].offsets[0] > 1 &&
          it.chunks[1].sizes[0] > 1) {
        it.chunks[1].offsets[0] += shift;
        it.chunks[1].sizes[0] -= shift;
        moved = k.fqn;
      }
      items.push_back(std::move(it));
    }
    ASSERT_FALSE(moved.empty()) << "no 2-D tensor in two chunks of rows";
    const std::string bytes = pt::dcp::metadata(items, files);
    std::ofstream(dir + "/.metadata", std::ios::binary | std::ios::trunc)
        .write(bytes.data(), std::streamsize(bytes.size()));
    const Findings f = verify(dir);
    EXPECT_TRUE(found(f, "dcp-chunks", Severity::Fail)) << text(f);
    EXPECT_NE(text(f).find(moved), std::string::npos) << text(f);
    EXPECT_NE(text(f).find(shift < 0 ? "overlap" : "leave a hole"), std::string::npos) << text(f);
    EXPECT_EQ(f.exit_code(), 2);
  }
}

TEST(Verify, TruncatedDcpDataFileFails) {
  const std::string dir = test::temp_dir() + "/step-3";
  test::copy_fixture("dcp/fsdp2_ws2_fp32/checkpoint/step-3", dir);
  const std::string data = dir + "/__1_0.distcp";
  fs::resize_file(data, fs::file_size(data) - 10);
  const Findings f = verify(dir);
  EXPECT_TRUE(found(f, "files-open", Severity::Fail)) << text(f);
  EXPECT_EQ(f.exit_code(), 2);
}

// A safetensors file of `tensors` (name, values), as the format lays it out.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, std::vector<float>>>& tensors) {
  std::string header = "{", data;
  for (const auto& [name, v] : tensors) {
    header += std::string(header.size() > 1 ? "," : "") + "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" +
              std::to_string(v.size()) + "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + v.size() * 4) + "]}";
    data.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  header += "}";
  const uint64_t len = header.size();
  test::write_file(path, std::string(reinterpret_cast<const char*>(&len), 8) + header + data);
}

TEST(Verify, ExpertResetToItsInitialisationIsAnOutlier) {
  const std::string dir = test::temp_dir();
  std::vector<std::pair<std::string, std::vector<float>>> experts;
  for (int e = 0; e < 8; ++e) {
    std::vector<float> w(64);
    for (size_t i = 0; i < w.size(); ++i) w[i] = float((i % 7) - 3) * (e == 5 ? 0.002f : 0.05f);  // 5: a tiny init
    experts.emplace_back("layers.0.mlp.experts." + std::to_string(e) + ".w1", w);
  }
  write_safetensors(dir + "/model.safetensors", experts);
  const Findings f = verify(dir);
  EXPECT_TRUE(found(f, "norm-outlier", Severity::Warn)) << text(f);
  EXPECT_NE(text(f).find("experts.5.w1"), std::string::npos) << text(f);
  EXPECT_EQ(f.exit_code(), 1);
}

// Packed experts (issue 43): the experts of one parameter (transformers 5's
// layers.0.mlp.experts.gate_up_proj [4, 192, 64]) are weighed against each other as siblings are.
// A real Trainer + DeepSpeed Mixtral run with expert 2 scaled to 1/20 (its zip CRCs mended, so that
// only the number checks can tell); the RMS verify prints is compared with one computed here from
// the shard bytes. The unmodified run has no norm-outlier finding.
std::string moe_crafted(size_t expert, float scale, bool zero_moments) {
  const std::string ckpt = test::moe_copy_with_expert(test::kPackedGateUp, expert, scale, zero_moments);
  for (const auto& path : test::pt_files(ckpt)) fix_crcs(path);
  return ckpt;
}

TEST(Verify, AResetExpertOfAPackedParameterIsAnOutlier) {
  const std::string ckpt = moe_crafted(2, 0.05f, false);
  const Findings f = verify(ckpt);
  EXPECT_FALSE(found(f, "zip-crc", Severity::Fail)) << text(f);
  std::vector<const Finding*> outliers;
  for (const auto& x : f.findings)
    if (x.check == "norm-outlier") outliers.push_back(&x);
  ASSERT_EQ(outliers.size(), 1u) << text(f);
  EXPECT_EQ(outliers[0]->severity, Severity::Warn);
  EXPECT_EQ(outliers[0]->subject, test::kPackedGateUp + " expert 2") << text(f);
  const auto ix = ds::index_tag(ckpt + "/global_step2");
  const double rms =
      std::sqrt(test::expert_sumsq(*ix, test::kPackedGateUp, 0)[2] / double(ix->find(test::kPackedGateUp)->numel / 4));
  const std::string& m = outliers[0]->message;
  ASSERT_EQ(m.rfind("RMS ", 0), 0u) << m;
  EXPECT_NEAR(std::stod(m.substr(4)), rms, 1e-5 * rms) << m;  // "%.6g"
  EXPECT_EQ(f.exit_code(), 1) << text(f);

  const Findings clean = verify(test::kFixtures + "/" + test::kMoeRun);
  EXPECT_FALSE(found(clean, "norm-outlier", Severity::Warn)) << text(clean);
}

TEST(Verify, AnExpertWithoutGradientIsNamed) {
  const Findings f = verify(moe_crafted(1, 1.0f, true));
  bool named = false;
  for (const auto& x : f.findings)
    named = named || (x.check == "moments-not-reset" && x.severity == Severity::Warn &&
                      x.subject == test::kPackedGateUp + " expert 1 exp_avg_sq");
  EXPECT_TRUE(named) << text(f);
  EXPECT_FALSE(found(f, "moments-not-reset", Severity::Fail)) << text(f);
}

TEST(Diff, FixtureAgainstConverterOutputsIsEqual) {
  for (const auto& name : test::kFixtureNames) {
    const std::string ck = test::kFixtures + "/" + name + "/checkpoint";
    for (const char* what :
         {"/ds_to_universal", "/zero_to_fp32/model.safetensors", "/zero_to_fp32/pytorch_model.bin"}) {
      const DiffResult r = diff(ck, test::kFixtures + "/" + name + what);
      // zero_to_fp32.py writes no frozen parameter of a ZeRO-1 tag (its module holds frozen_scale):
      // the one difference diff must show there.
      const bool drops_frozen = name.starts_with("z1_") && std::string(what).starts_with("/zero_to_fp32");
      EXPECT_EQ(r.differences(), drops_frozen ? 1u : 0u) << name << what << "\n" << text(r);
      if (drops_frozen)
        for (const auto& row : r.rows)
          if (row.counts()) {
            EXPECT_TRUE(row.param == "frozen_scale" && row.status == "missing in B") << text(r);
          }
      EXPECT_GT(r.rows.size(), 8u) << text(r);
    }
  }
}

TEST(Diff, MissingRenamedAndChangedKeysDiffer) {
  const std::string dir = test::temp_dir() + "/u";
  test::copy_fixture("z2_ws2_fp32_pg2/ds_to_universal", dir);
  const std::string zero = dir + "/global_step3_universal/zero";
  fs::remove(zero + "/fc1.weight/exp_avg.pt");                 // a missing key
  fs::rename(zero + "/fc2.bias", zero + "/fc2.bias_renamed");  // a renamed key
  const DiffResult r = diff(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint", dir);
  size_t missing = 0;
  for (const auto& row : r.rows) missing += row.status.starts_with("missing");
  EXPECT_EQ(missing, 1u + 4u + 4u) << text(r);  // exp_avg; fc2.bias's 4 states on each side
  EXPECT_EQ(r.exit_code(), 1);
  // One value changed: beyond --atol 0, within --atol 1.
  const std::string one = dir + "/global_step3_universal/zero/fc1.bias/fp32.pt";
  auto pt = pt::load_pt(one);
  const float x = 0.5f;
  patch(one, pt->root->get("param")->tensor->byte_offset(), &x, 4);
  const DiffResult r2 = diff(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint", dir);
  bool changed = false;
  for (const auto& row : r2.rows)
    changed |= row.param == "fc1.bias" && row.state == "weight" && row.status == "differs";
  EXPECT_TRUE(changed) << text(r2);
}

TEST(Diff, PrefixesMatchAndAreSaid) {
  EXPECT_EQ(canonical_param("_orig_mod.module.model.fc1.weight"), "fc1.weight");
  EXPECT_EQ(canonical_param("optimizer.state.fc1.weight"), "fc1.weight");
  std::string why;
  canonical_param("module.fc1.weight", &why);
  EXPECT_EQ(why, "'module.'");
}

}  // namespace
}  // namespace zm::check

namespace zm::check {
namespace {

// An optimizer.pt's unnamed ids and a named input's numbering, as the readers leave them.
Input unnamed_input(const TorchOrder& order) {
  Input in;
  in.unnamed_ids = true;
  in.torch_order = order;
  auto members = std::make_shared<std::vector<std::string>>();
  for (const auto& g : order)
    for (const auto& p : g) {
      Item it;
      it.param = p.name;
      it.state = "exp_avg";
      it.shape = p.shape;
      in.items.push_back(it);
      members->push_back(p.name);
    }
  Item lr;
  lr.state = "lr";
  lr.value = 1e-3;
  lr.members = members;
  in.items.push_back(lr);
  return in;
}

TEST(TorchNames, IdsAreNamedByTheOtherSidesOrderWhenCountsAndShapesAgree) {
  Input named;
  named.torch_order = {{{"fc.weight", {3, 2}}, {"fc.bias", {3}}}};
  Input in = unnamed_input({{{"param 0", {3, 2}}, {"param 1", {3}}}});
  std::string said;
  ASSERT_TRUE(name_torch_ids(in, named, said)) << said;
  EXPECT_EQ(in.items[0].param, "fc.weight");
  EXPECT_EQ(in.items[1].param, "fc.bias");
  EXPECT_EQ(*in.items[2].members, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_FALSE(in.unnamed_ids);
}

TEST(TorchNames, ShapesCountsOrGroupsThatDisagreeLeaveIdsUnnamed) {
  Input named;
  named.torch_order = {{{"fc.weight", {3, 2}}, {"fc.bias", {3}}}};
  const std::vector<TorchOrder> wrong = {
      {{{"param 0", {3}}, {"param 1", {3, 2}}}},    // the order swapped: shapes disagree
      {{{"param 0", {3, 2}}}},                      // one id fewer
      {{{"param 0", {3, 2}}}, {{"param 1", {3}}}},  // two groups against one
  };
  for (const TorchOrder& order : wrong) {
    Input in = unnamed_input(order);
    std::string said;
    EXPECT_FALSE(name_torch_ids(in, named, said));
    EXPECT_NE(said.find("left as 'param <id>'"), std::string::npos) << said;
    EXPECT_EQ(in.items[0].param, "param 0");
  }
  // Its own weight of another shape under the other side's name refuses too.
  Input in = unnamed_input({{{"param 0", {3, 2}}, {"param 1", {3}}}});
  Item w;
  w.param = "fc.bias";
  w.state = kWeight;
  w.shape = {4};
  in.items.push_back(w);
  std::string said;
  EXPECT_FALSE(name_torch_ids(in, named, said));
  EXPECT_NE(said.find("its own weight fc.bias"), std::string::npos) << said;
}

}  // namespace
}  // namespace zm::check
