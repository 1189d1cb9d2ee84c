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

// Writes `values` (fp32 masters: ix.master_dtype F32) over elements [first, first + size) of
// parameter p's flat state k (0 = fp32), in place in the shards, through its fragments.
void write_elements(const ds::TagIndex& ix, const ds::Param& p, size_t k, uint64_t first,
                    const std::vector<float>& values);

// A real Trainer + DeepSpeed run with packed experts (fixtures/hf_moe/mixtral_z2_fp32/checkpoint-2,
// tag global_step2, fp32, 4 experts): a copy in which expert `expert` of `param` has its fp32
// master slice multiplied by `scale` (a reset to a small initialisation) and, with
// `zero_moments`, its exp_avg and exp_avg_sq slices set to 0 (no token ever reached it).
inline const std::string kMoeRun = "hf_moe/mixtral_z2_fp32/checkpoint-2";
inline const std::string kPackedGateUp = "model.layers.0.mlp.experts.gate_up_proj";
std::string moe_copy_with_expert(const std::string& param, size_t expert, float scale, bool zero_moments);
// Per expert, the sum of squares (in double, element by element) of state k of `param`, read from
// the shard bytes: what the checks must find, computed without the code under test.
std::vector<double> expert_sumsq(const ds::TagIndex& ix, const std::string& param, size_t k);

}  // namespace zm::test
