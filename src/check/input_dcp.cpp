// A DCP folder: `.metadata` decoded and checked (read_metadata refuses chunks that overlap, leave
// a hole or run outside their tensor: dcp-chunks), its data files present and long enough, each
// item's archive records checked, and each tensor key's chunks laid out row-major as one item.
#include <algorithm>
#include <filesystem>
#include <set>

#include "readers.h"
#include "zeromount/ds/dcp_source.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/dcp_item.h"
#include "zeromount/pt/dcp_keys.h"
#include "zeromount/pt/dcp_read.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace fs = std::filesystem;
namespace dcp = pt::dcp;

namespace {

// A contiguous run of a chunk: `n` elements at element `at` of the whole tensor, at byte `offset`
// of its data file.
struct Run {
  uint64_t at, offset, n;
  uint32_t file;
};

// The runs of chunk `c` of a tensor of `size`: the chunk's rows along its trailing dimensions that
// span the whole tensor are contiguous in both.
void chunk_runs(const std::vector<int64_t>& size, const dcp::StoredChunk& c, uint32_t file, uint64_t offset,
                size_t esize, std::vector<Run>& out) {
  const size_t d = size.size();
  if (d == 0) {
    out.push_back({0, offset, 1, file});
    return;
  }
  std::vector<uint64_t> stride(d, 1);
  for (size_t i = d - 1; i > 0; --i) stride[i - 1] = stride[i] * uint64_t(size[i]);
  size_t j = d - 1;  // dimensions after j are whole
  while (j > 0 && c.sizes[j] == size[j]) --j;
  uint64_t run = 1;
  for (size_t i = j; i < d; ++i) run *= uint64_t(c.sizes[i]);
  if (run == 0) return;
  std::vector<int64_t> idx(j, 0);
  for (uint64_t local = 0;; local += run) {
    uint64_t at = uint64_t(c.offsets[j]) * stride[j];
    for (size_t i = 0; i < j; ++i) at += uint64_t(c.offsets[i] + idx[i]) * stride[i];
    out.push_back({at, offset + local * esize, run, file});
    size_t i = j;  // the odometer over dimensions [0, j)
    while (i > 0 && ++idx[i - 1] == c.sizes[i - 1]) idx[--i] = 0;
    if (i == 0) break;
  }
}

}  // namespace

void read_dcp(const std::string& folder, Input& in, Findings& f) {
  const std::string md_path = (fs::path(folder) / ".metadata").string();
  dcp::ReadMetadata md;
  try {
    md = dcp::read_metadata(pt::File(md_path));
    f.ran("dcp-chunks", md.keys.size());
  } catch (const Error& e) {
    f.fail("dcp-chunks", ".metadata", e.what());
    return;
  }
  try {
    dcp::check_folder(md, folder);
    f.ran("files-open");
  } catch (const Error& e) {
    f.fail("files-open", ".metadata", e.what());
  }
  const dcp::Style style = dcp::style_of(md);
  in.kind = "dcp folder (" + std::string(dcp::style_name(style)) + ")";
  in.holds_optimizer = style != dcp::Style::ModelOnly;
  std::set<std::pair<uint32_t, uint64_t>> checked;  // items whose records were checked
  uint64_t hyper = 0, bytes_keys = 0;
  for (const auto& k : md.keys) {
    const dcp::KeyRole role = dcp::key_role(k);
    if (role.family == dcp::Family::ParamGroup) {
      ++hyper;
      continue;
    }
    if (!k.tensor) {
      ++bytes_keys;
      continue;
    }
    Item it;
    it.param = role.family == dcp::Family::Other ? k.fqn : role.param;
    it.state = role.family == dcp::Family::OptimizerState ? state_named(role.name) : kWeight;
    it.trainable = role.family != dcp::Family::Other;
    it.stored = k.fqn + " in .metadata";
    it.dtype = k.dtype;
    it.shape = k.size;
    std::vector<Run> runs;
    bool ok = true;
    for (const auto& c : k.chunks) {
      const std::string data = (fs::path(folder) / c.storage.relative_path).string();
      try {
        const uint32_t id = in.files.add(data);
        const pt::File& file = in.files.file(id);
        if (checked.insert({id, c.storage.offset}).second)
          check_zip(in.files, id, c.storage.offset, c.storage.length, c.storage.relative_path + " item of " + k.fqn, f);
        const dcp::ChunkBytes cb = dcp::chunk_bytes(file, k, c);
        chunk_runs(k.size, c, id, cb.offset, pt::element_size(k.dtype), runs);
      } catch (const Error& e) {
        f.fail("files-open", k.fqn, e.what());
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.at < b.at; });
    const size_t es = pt::element_size(k.dtype);
    for (const Run& r : runs) it.bytes.append_extent({r.file, r.offset, r.n * es});
    if (it.state == kStep && it.numel() == 1) {
      double v = 0;
      char raw[16];
      it.bytes.read(0, raw, es, in.files);
      v = pt::element_value(raw, k.dtype);
      in.steps.emplace_back(k.fqn, v);
    }
    in.items.push_back(std::move(it));
  }
  // A model key the optimizer keeps no state for is a buffer or a frozen parameter (DCP does not
  // say which), as the DCP source reads it: a universal folder keeps neither as a tensor.
  if (in.holds_optimizer) {
    std::set<std::string> optimized;
    for (const Item& it : in.items)
      if (it.state != kWeight) optimized.insert(it.param);
    for (Item& it : in.items)
      if (it.state == kWeight && !optimized.count(it.param)) it.trainable = false;
  }
  // The groups' hyper-parameters and the parameters each holds, as the DCP source reads them.
  if (hyper) try {
      add_index_hypers(*ds::index_dcp(folder), ".metadata param_groups", in, f);
    } catch (const Error& e) {
      f.notes.push_back(std::to_string(hyper) + " param-group key(s): not compared (" + e.what() + ")");
    }
  if (bytes_keys) f.notes.push_back(std::to_string(bytes_keys) + " bytes key(s): not read (pickles are not run)");
}

}  // namespace zm::check
