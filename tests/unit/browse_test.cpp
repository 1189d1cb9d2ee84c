// The browsing files' text: statistics that say what is not finite.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;

std::string info_of(const std::string& ckpt, const std::string& param) {
  auto v = view::View::load(ckpt);
  const view::Inode& n = at(*v, "/global_step3_params/" + param + "/info");
  const std::string s = content_of(*v, n);
  EXPECT_EQ(uint64_t(v->attr(n).st_size), s.size()) << "the size stat gave";
  return s;
}

std::string field(const std::string& info, const std::string& key) {
  for (size_t at = 0; at < info.size();) {
    const size_t end = info.find('\n', at);
    const std::string line = info.substr(at, end - at);
    if (line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ') return line.substr(11);
    at = end + 1;
  }
  return "(no " + key + ")";
}

TEST(ParamInfo, CountsNaNAndInfinityAndKeepsStatisticsFinite) {
  const std::string ckpt = temp_dir() + "/ckpt";
  copy_fixture("z2_ws2_fp32_pg2/checkpoint", ckpt);
  auto ix = ds::index_tag(ckpt + "/global_step3");
  const ds::Param* p = ix->find("fc1.bias");
  ASSERT_TRUE(p);
  // Every fp32 element of fc1.bias becomes NaN, except element 0 (+inf) and element 1 (2.0).
  uint64_t k = 0;
  for (const auto& f : ix->fragments(*p, 0)) {
    std::fstream io(ix->shards.at(f.extent.file).path, std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t e = 0; e < f.numel; ++e, ++k) {
      const float v = k == 0 ? INFINITY : k == 1 ? 2.0f : NAN;
      io.seekp(std::streamoff(f.extent.offset + e * 4));
      io.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  const std::string info = info_of(ckpt, "fc1.bias");
  EXPECT_EQ(field(info, "NaN"), std::to_string(p->numel - 2)) << info;
  EXPECT_EQ(field(info, "inf"), " 1") << info;
  EXPECT_DOUBLE_EQ(std::stod(field(info, "min")), 2.0) << info;
  EXPECT_DOUBLE_EQ(std::stod(field(info, "max")), 2.0) << info;
  EXPECT_DOUBLE_EQ(std::stod(field(info, "std")), 0.0) << info;
}

TEST(ParamInfo, NamesMasterAndModuleDtypes) {
  const std::string info = info_of(kFixtures + "/z2_ws2_bf16_pg2/checkpoint", "fc1.weight");
  EXPECT_EQ(field(info, "dtype").substr(0, 8), "float32 ") << info;
  EXPECT_EQ(field(info, "module").substr(0, 9), "bfloat16 ") << info;
  EXPECT_EQ(field(info, "NaN"), "  0") << info;
}

}  // namespace
}  // namespace zm::test
