#pragma once
#include <string>
#include <vector>

#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::test {

inline const std::string kFixtures = ZM_FIXTURES;
inline const std::vector<std::string> kFixtureNames = {"z1_ws2_fp32_pg2", "z2_ws2_fp32_pg2", "z3_ws2_fp32_pg2",
                                                       "z3_ws2_fp32_pg2_sg200"};

std::string read_file(const std::string& path);
// The tag tests/fixtures/<fixture>/checkpoint/latest names.
std::string fixture_latest(const std::string& fixture);
void write_file(const std::string& path, const std::string& bytes);
std::string temp_dir();  // fresh, under TMPDIR
// A copy of tests/fixtures/<what> (a file or a whole folder) at `to`, for a test that changes it.
void copy_fixture(const std::string& what, const std::string& to);
// Every .pt file below a folder, sorted.
std::vector<std::string> pt_files(const std::string& dir);
// The raw bytes of a contiguous tensor of a loaded file.
std::string tensor_bytes(const pt::PtFile& f, const pt::Tensor& t);
// FileTable by id, opened on demand: a ExtentReader for VirtualFiles in tests.
class PathSource : public pt::ExtentReader {
 public:
  explicit PathSource(std::vector<std::string> paths) : paths_(std::move(paths)) {}
  void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const override;

 private:
  std::vector<std::string> paths_;
};
std::string read_all(const pt::VirtualFile& f, const pt::ExtentReader& src);
// The bytes of `extents` of the index's shards, in order.
std::string extent_bytes(const ds::TagIndex& ix, const std::vector<pt::Extent>& extents);
// Parameter p's flat state k (0 = fp32) as its fragments hold it: p.numel elements.
std::string fragment_bytes(const ds::TagIndex& ix, const ds::Param& p, size_t k);

}  // namespace zm::test
