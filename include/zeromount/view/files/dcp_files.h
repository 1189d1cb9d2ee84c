#pragma once
// One tag's whole training state as a torch.distributed.checkpoint (DCP) folder:
// `.metadata` and data files of torch.save items, what torch's own FSDP2 save of
// get_state_dict(model, optimizer) holds, built lazily from the shards like every made-up file.
#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/ds/torch_state.h"
#include "zeromount/pt/dcp.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/files/weights.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/mounted_tag.h"
#include "zeromount/view/tree.h"

namespace zm::view {

struct DcpShape {
  int world = 1;            // tensors cut where FSDP2 shards them at `world` ranks; 1: whole
  bool model = true;        // model.<fqn>
  bool optimizer = true;    // optimizer.state.<fqn>.<k>, optimizer.param_groups.<i>.<hyper>
  bool torchtitan = false;  // also <fqn> and optimizer.param_groups.<fqn>.<hyper>, over the same bytes
  auto operator<=>(const DcpShape&) const = default;
};

// How many chunks a DCP folder of `t` at `shape` holds (each tensor cut in min(rows, world)), and
// the most one may hold. Anyone may look up layouts/fsdp-dp65536: a plan keeps 16 bytes a chunk
// (where its item lies) and `.metadata` is never held whole (pt::dcp::layout_metadata), so the
// bound keeps a plan within half the plan budget: 2 million chunks, 32 MiB of plan and a `.metadata`
// of about 270 MB.
// `weights`: the tag's weight_tensors(Master) when the caller has them, else listed here.
uint64_t dcp_chunks(const MountedTag& t, DcpShape shape, const std::vector<WeightTensor>* weights = nullptr);
inline constexpr uint64_t kDcpChunkBytes = 16;
inline constexpr uint64_t kMaxDcpChunks = 2'000'000;
static_assert(kMaxDcpChunks * kDcpChunkBytes <= kPlanBudget / 2);
// Why a DCP folder of `t` at `shape` is not made (more than kMaxDcpChunks chunks), or "": the one
// check a plan and a layouts/fsdp-dp<W> lookup both make.
std::string dcp_size_refusal(const MountedTag& t, DcpShape shape, const std::vector<WeightTensor>* weights = nullptr);

// What one DCP folder holds: where each item's chunks lie in which data file, and the cut points
// of its `.metadata`. Small records per tensor and 16 bytes per chunk; the metadata's bytes are
// made in blocks when read and each data file's layout when it is opened.
class DcpPlan final : public pt::dcp::MetadataSource {
 public:
  DcpPlan(const MountedTag& t, DcpShape shape);  // throws zm::Error when the state cannot be shown
  uint64_t metadata_size() const { return layout_.size; }
  // `.metadata`'s bytes, made from `plan` block by block as they are read.
  static pt::VirtualFile metadata(const std::shared_ptr<const DcpPlan>& plan);
  size_t files() const override { return sizes_.size(); }
  std::string file_name(size_t k) const override { return pt::dcp::data_file_name(int(k)); }
  uint64_t file_size(size_t k) const { return sizes_.at(k); }
  pt::VirtualFile build(size_t file) const;
  uint64_t bytes() const;  // what the plan keeps (the plan cache's weight)

  size_t items() const override { return entries_.size(); }
  void item(size_t i, pt::dcp::Item& out, size_t& chunk_count) const override;
  void chunk(size_t i, size_t k, pt::dcp::Chunk& out) const override;

  // Where a tensor's bytes come from: a model tensor, a partitioned optimizer state, a per-group
  // value stored as a tensor ('step'), or a pickled object (a hyper-parameter, a group's names).
  struct Source {
    enum Kind : uint8_t { Model, State, Scalar, Zeros, Hyper, Names } kind;
    uint32_t index = 0;  // Model: weight_tensors position; State, Scalar, Zeros: param; Hyper, Names: group
    uint32_t k = 0;      // State: state; Scalar: scalar name; Zeros: 0 a moment, 1 step; Hyper: hypers[k]
  };

 private:
  // One distinct run of bytes in the data files: a tensor cut in rows at `world` ranks (chunk r in
  // file r), or whole in file 0 (a 0-d tensor, one rank, an object).
  struct Placed {
    Source what;
    pt::DType dtype = pt::DType::F32;
    const std::vector<int64_t>* shape = nullptr;  // a tensor's, else nullptr
    bool cut = false;
    uint32_t chunks = 1;
    uint64_t first = 0;  // its chunks' places: at_[first, first + chunks)
  };
  struct Place {
    uint64_t offset, length;
  };
  // One key of `.metadata`: how its name is spelt, and the bytes it names.
  struct Entry {
    enum Name : uint8_t { Model, ModelTop, State, Scalar, Fresh, Hyper, HyperFlat, Names } name;
    uint32_t source;
    uint32_t a = 0, b = 0, c = 0;  // Model: weight; State, Scalar: param, state; Fresh: param, which;
                                   // Hyper: group, hyper; HyperFlat: group, hyper, param; Names: group
  };
  struct ModelTensor {
    const std::string* name;
    const std::vector<int64_t>* shape;
    pt::DType dtype;
  };
  const pt::Node* names_node(pt::Arena& a, uint32_t group) const;  // a group's parameter names
  const pt::Node* object_node(pt::Arena& a, const Source& s) const;
  int world() const { return int(sizes_.size()); }
  pt::dcp::Rows rows_of(const Placed& p, size_t k) const;
  void chunk_of(const Placed& p, size_t k, pt::dcp::Chunk& out) const;
  const MountedTag* tag_;
  std::vector<ModelTensor> model_;
  std::vector<ds::TorchGroup> groups_;
  std::vector<Placed> sources_;
  std::vector<Entry> entries_;
  std::vector<Place> at_;
  std::vector<uint64_t> sizes_;
  pt::dcp::MetadataLayout layout_;
};

// The DCP folders' plans of one View (make_dcp_plans, provider.h): the eight used last kept within
// kPlanBudget, keyed by tag and shape. The View owns it and every DCP folder and file it makes
// holds it, so a key's tag outlives the plans kept for it.
class DcpPlans {
 public:
  std::shared_ptr<const DcpPlan> get(const MountedTag& t, DcpShape shape) const;

 private:
  mutable Memo<std::pair<const MountedTag*, DcpShape>, DcpPlan, 8> memo_{
      kPlanBudget, [](const DcpPlan& p) { return p.bytes(); }, &plan_weight()};
};

// A folder's entries: `.metadata` and the data files of `t` at `shape`. The plan is made on the
// first lookup (before the tree's lock: LazyDir::prepare), kept among the few used last in
// `plans`, and made again when needed.
std::shared_ptr<const LazyDir> make_dcp_dir(std::shared_ptr<const DcpPlans> plans, const MountedTag& t, DcpShape shape,
                                            struct timespec mtime);

}  // namespace zm::view
