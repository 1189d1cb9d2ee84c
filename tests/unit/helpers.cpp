#include "helpers.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

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

}  // namespace zm::test
