#pragma once
// The files of one faked native layout [layouts §1-§3]: a tag of the source presented as if
// DeepSpeed had saved it at another ZeRO stage, DP size and precision. Headers are inline, tensor
// bytes are extents of the source shards placed by the partition plan, padding is zero fill and
// precision changes are computed on read.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/ds/model_file.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

// How many model-state pickles layouts have decoded so far: the plans of one tag share one
// skeleton of it while any of them is alive (the unit tests count them).
uint64_t layout_source_decodes();

// One (source tag, target) pair: the plan is made once, O(params); rank files are built on demand.
class LayoutTag {
 public:
  // Throws zm::Error (EINVAL, naming the reason and the spec section) when the target cannot be made
  // whole: what the plan refuses, and a source 'module' the model-state files cannot present.
  LayoutTag(const MountedTag& tag, const ds::TargetLayout& target);

  const MountedTag& tag() const { return tag_; }
  const ds::TargetLayout& target() const { return plan_.target; }
  const ds::PartitionPlan& plan() const { return plan_; }

  // The tag folder's files: listing position k < files(), and the inverse (nullopt for any name
  // that is not exactly one of them).
  uint64_t files() const;
  std::string file_name(uint64_t k) const;
  std::optional<uint64_t> file_index(std::string_view name) const;
  pt::VirtualFile build(uint64_t k) const;
  // Whether size() knows a file's size without building it: where files of one kind have the same
  // pickle, i.e. at ZeRO-3 targets every optimizer file, and every model-state file but rank 0's
  // (which alone holds shared_params). ZeRO-1/2 and bf16opt rank files differ: they are built.
  bool sized() const { return zero3(); }
  // The first file of a kind asked for is pickled once; every other one is only laid out under
  // its own name (pt_size), once per length of name. Throws unless sized().
  uint64_t size(uint64_t k) const;

  // What the fakes copy from the source's model-state pickle, read once per tag.
  const ds::ModelSkeleton& source_model() const;
  // Frozen parameters, full, in the source's stored dtype.
  const std::vector<ds::PlainTensor>& frozen() const;
  // What the plan keeps, in bytes (the plan cache's weight; .zeromount/stats sums them).
  uint64_t bytes() const;

 private:
  bool zero3() const { return plan_.target.stage == ds::TargetStage::Zero3; }
  void check_module() const;
  // File k's pickle (its tensors carry their data) and its .pt options (archive name, CRCs).
  const pt::Node* pickle(uint64_t k, pt::Arena& a) const;
  pt::PtOptions options(uint64_t k) const;
  const pt::Node* model_states(uint32_t rank, pt::Arena& a) const;
  const pt::Node* optim_states(uint32_t rank, pt::Arena& a) const;
  const MountedTag& tag_;
  // The skeleton of the source's model-state pickle, made once (source_model): before options_,
  // which the constructor reads from it.
  mutable std::once_flag loaded_;
  mutable std::shared_ptr<const ds::ModelSkeleton> model_;  // shared by every plan of the tag (shared_source)
  ds::SourceOptions options_;
  ds::PartitionPlan plan_;
  mutable std::mutex sized_mu_;  // guards what size() keeps:
  mutable std::optional<pt::PtRecords> records_[3];
  mutable std::map<std::pair<size_t, size_t>, uint64_t> sizes_;  // (kind, name length) -> size
};

}  // namespace zm::view
