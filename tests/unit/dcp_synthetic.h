#pragma once
// A DCP folder's Metadata made on demand (pt/dcp.h's MetadataSource), for the `.metadata` writer's
// tests: `tensors` optimizer items of rows x cols fp32, each cut in FSDP2's row chunks at `world`
// ranks (chunk k in file k, `length` bytes at i * length of it), and optionally one bytes item
// (param group 0's lr, in file 0): what an FSDP2 save of many parameters names, at any size, with
// nothing held per chunk.
#include <string>
#include <vector>

#include "zeromount/pt/dcp.h"

namespace zm::test {

struct RowChunksShape {
  size_t tensors = 1;
  int64_t rows = 1, cols = 1;
  int world = 1;
  std::string state = "exp_avg";  // the items' optimizer state
  uint64_t length = 1000;         // each chunk's bytes in its data file
  bool lr_item = false;           // and a bytes item after the tensors
};

class RowChunks final : public pt::dcp::MetadataSource {
 public:
  explicit RowChunks(RowChunksShape s) : s_(std::move(s)) {}
  size_t items() const override { return s_.tensors + (s_.lr_item ? 1 : 0); }
  void item(size_t i, pt::dcp::Item& out, size_t& chunk_count) const override {
    if (i == s_.tensors) {
      out.fqn = "optimizer.param_groups.0.lr";
      out.path = {"optimizer", "param_groups", int64_t(0), "lr"};
      out.tensor = false;
      out.size.clear();
      chunk_count = 1;
      return;
    }
    const std::string param = "layers." + std::to_string(i) + ".weight";
    out.fqn = "optimizer.state." + param + "." + s_.state;
    out.path = {"optimizer", "state", param, s_.state};
    out.tensor = true;
    out.dtype = pt::DType::F32;
    out.size = {s_.rows, s_.cols};
    chunk_count = size_t(pt::dcp::fsdp_ranks_with_rows(s_.rows, s_.world));
  }
  void chunk(size_t i, size_t k, pt::dcp::Chunk& out) const override {
    if (i == s_.tensors) {
      out = pt::dcp::Chunk{{}, {}, 0, 7, 1261};
      return;
    }
    const pt::dcp::Rows r = pt::dcp::fsdp_rows(s_.rows, s_.world, int(k));
    out.offsets = {r.first, 0};
    out.sizes = {r.n, s_.cols};
    out.file = uint32_t(k);
    out.offset = i * s_.length;
    out.length = s_.length;
  }
  size_t files() const override { return size_t(s_.world); }
  std::string file_name(size_t k) const override { return pt::dcp::data_file_name(int(k)); }

  std::vector<pt::dcp::Item> held() const {  // the same items, held whole
    std::vector<pt::dcp::Item> out(items());
    for (size_t i = 0; i < out.size(); ++i) {
      size_t n = 0;
      item(i, out[i], n);
      out[i].chunks.resize(n);
      for (size_t k = 0; k < n; ++k) chunk(i, k, out[i].chunks[k]);
    }
    return out;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (size_t k = 0; k < files(); ++k) out.push_back(file_name(k));
    return out;
  }

 private:
  RowChunksShape s_;
};

}  // namespace zm::test
