#include "helpers.h"

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/file.h"

namespace zm::test {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string fixture_latest(const std::string& fixture) {
  const std::string t = read_file(kFixtures + "/" + fixture + "/checkpoint/latest");
  return t.substr(0, t.find_last_not_of(" \n") + 1);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string temp_dir() {
  std::string t = (fs::temp_directory_path() / "zmtest.XXXXXX").string();
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  return t;
}

void copy_fixture(const std::string& what, const std::string& to) {
  fs::copy(kFixtures + "/" + what, to, fs::copy_options::recursive);
}

std::vector<std::string> pt_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && (e.path().extension() == ".pt" || e.path().extension() == ".bin"))
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string tensor_bytes(const pt::PtFile& f, const pt::Tensor& t) {
  if (!t.contiguous()) throw std::runtime_error("strided tensor");
  return f.file.read_string(t.byte_offset(), t.nbytes(), "tensor");
}

void PathSource::pread(uint32_t file, uint64_t offset, void* buf, size_t n) const {
  pt::File(paths_.at(file)).read_exact(offset, buf, n, "test source");
}

std::string read_all(const pt::VirtualFile& f, const pt::ExtentReader& src) {
  std::string s(f.size(), '\0');
  if (f.read(0, s.data(), s.size(), src) != s.size()) throw std::runtime_error("short read");
  return s;
}

std::string extent_bytes(const ds::TagIndex& ix, const std::vector<pt::Extent>& extents) {
  std::string out;
  for (const auto& e : extents) out += pt::File(ix.shards.at(e.file).path).read_string(e.offset, e.length, "extent");
  return out;
}

std::string fragment_bytes(const ds::TagIndex& ix, const ds::Param& p, size_t k) {
  std::vector<pt::Extent> extents;
  for (const auto& f : ix.fragments(p, k)) extents.push_back(f.extent);
  return extent_bytes(ix, extents).substr(0, p.numel * pt::element_size(ix.master_dtype));
}

void write_elements(const ds::TagIndex& ix, const ds::Param& p, size_t k, uint64_t first,
                    const std::vector<float>& values) {
  for (const auto& f : ix.fragments(p, k)) {
    const uint64_t lo = std::max(first, f.start), hi = std::min(first + values.size(), f.start + f.numel);
    if (lo >= hi) continue;
    std::fstream io(ix.shards.at(f.extent.file).path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(f.extent.offset + (lo - f.start) * 4));
    io.write(reinterpret_cast<const char*>(values.data() + (lo - first)), std::streamsize((hi - lo) * 4));
  }
}

std::vector<double> expert_sumsq(const ds::TagIndex& ix, const std::string& param, size_t k) {
  const ds::Param* p = ix.find(param);
  if (!p) throw std::runtime_error(param + " is not in the tag");
  const std::string bytes = fragment_bytes(ix, *p, k);
  const uint64_t experts = uint64_t(p->shape.at(0)), per = p->numel / experts;
  std::vector<double> out(experts, 0);
  for (uint64_t i = 0; i < p->numel; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    out[i / per] += double(v) * double(v);
  }
  return out;
}

std::string moe_copy_with_expert(const std::string& param, size_t expert, float scale, bool zero_moments) {
  const std::string ckpt = temp_dir() + "/checkpoint-2";
  copy_fixture(kMoeRun, ckpt);
  auto ix = ds::index_tag(ckpt + "/global_step2");
  const ds::Param* p = ix->find(param);
  if (!p) throw std::runtime_error(param + " is not in the tag");
  const uint64_t per = p->numel / uint64_t(p->shape.at(0)), first = expert * per;
  const std::string fp32 = fragment_bytes(*ix, *p, 0);
  std::vector<float> slice(per);
  std::memcpy(slice.data(), fp32.data() + first * 4, per * 4);
  for (float& v : slice) v *= scale;
  write_elements(*ix, *p, 0, first, slice);
  // The module weight (fp32 in this run) changes with its master, as a reset changes both: only
  // the numbers are wrong, not the module's agreement with them.
  const ds::PlainTensor& module = ix->module_weights.at(size_t(p - ix->params.data()));
  if (module.dtype != pt::DType::F32 || module.data.size() != 1) throw std::runtime_error("not an fp32 module");
  std::fstream io(ix->shards.at(module.data[0].file).path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(std::streamoff(module.data[0].offset + first * 4));
  io.write(reinterpret_cast<const char*>(slice.data()), std::streamsize(per * 4));
  if (zero_moments)
    for (const char* state : {"exp_avg", "exp_avg_sq"}) {
      const size_t k =
          size_t(std::find(ix->state_names.begin(), ix->state_names.end(), state) - ix->state_names.begin());
      write_elements(*ix, *p, k, first, std::vector<float>(per, 0.0f));
    }
  return ckpt;
}

}  // namespace zm::test
