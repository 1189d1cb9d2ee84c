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
// the most one may hold: its `.metadata` and plan grow with that count, and anyone may look up
// layouts/fsdp-dp65536, so a folder past the bound is refused, never built (a few hundred bytes
// of plan and metadata per chunk: 2 million chunks are about 1 GiB).
// `weights`: the tag's weight_tensors(Master) when the caller has them, else listed here.
uint64_t dcp_chunks(const MountedTag& t, DcpShape shape, const std::vector<WeightTensor>* weights = nullptr);
inline constexpr uint64_t kMaxDcpChunks = 2'000'000;
// Why a DCP folder of `t` at `shape` is not made (more than kMaxDcpChunks chunks), or "": the one
// check a plan and a layouts/fsdp-dp<W> lookup both make.
std::string dcp_size_refusal(const MountedTag& t, DcpShape shape, const std::vector<WeightTensor>* weights = nullptr);

// What one DCP folder holds: its items' chunks, data files and sizes. O(tensors x world) small
// records; the bytes are laid out only when a data file is opened.
class DcpPlan {
 public:
  DcpPlan(const MountedTag& t, DcpShape shape);  // throws zm::Error when the state cannot be shown
  const std::string& metadata() const { return metadata_; }
  size_t files() const { return sizes_.size(); }
  uint64_t file_size(size_t k) const { return sizes_.at(k); }
  pt::VirtualFile build(size_t file) const;
  uint64_t bytes() const;  // what the plan keeps (the plan cache's weight)

  // Where a tensor's bytes come from: a model tensor, a partitioned optimizer state, a per-group
  // value stored as a tensor ('step'), or a pickled object (a hyper-parameter, a group's names).
  struct Source {
    enum Kind : uint8_t { Model, State, Scalar, Zeros, Hyper, Names } kind;
    uint32_t index = 0;  // Model: weight_tensors position; State, Scalar, Zeros: param; Hyper, Names: group
    uint32_t k = 0;      // State: state; Scalar: scalar name; Zeros: 0 a moment, 1 step; Hyper: hypers[k]
  };

 private:
  struct Piece {
    uint32_t source;
    int64_t first_row = 0, rows = -1;  // rows -1: the whole tensor
  };
  const pt::Node* names_node(pt::Arena& a, uint32_t group) const;  // a group's parameter names
  const MountedTag* tag_;
  std::vector<ds::TorchGroup> groups_;
  std::vector<Source> sources_;
  std::vector<std::vector<Piece>> pieces_;  // per data file, in file order
  std::vector<uint64_t> sizes_;
  std::string metadata_;
};

// A folder's entries: `.metadata` and the data files of `t` at `shape`. The plan is made on the
// first lookup, kept among the few used last (process-wide), and made again when needed.
std::shared_ptr<const LazyDir> make_dcp_dir(const MountedTag& t, DcpShape shape, struct timespec mtime);

}  // namespace zm::view
