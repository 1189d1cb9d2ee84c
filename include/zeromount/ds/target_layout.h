#pragma once
// A target layout [layouts]: the ZeRO stage, DP size and precision at which
// a source tag is presented, and the partition arithmetic DeepSpeed would have used at it.
// The plan is O(params); every per-rank answer is computed on demand, since W' may be 65536.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/ds/tag_index.h"

namespace zm::ds {

enum class TargetStage : uint8_t { Zero1, Zero2, Zero3, Bf16Opt };
enum class Precision : uint8_t { Fp32, Fp16, Bf16 };

inline constexpr uint64_t kDefaultSubGroupSize = 1000000000;  // zero/config.py default
inline constexpr uint32_t kMaxLayoutDp = 65536;               // [layouts §6]

struct TargetLayout {
  TargetStage stage = TargetStage::Zero2;
  uint32_t dp = 1;
  Precision precision = Precision::Fp32;           // bf16 for Bf16Opt
  bool round_robin = false;                        // zero1/2 round_robin_gradients
  uint64_t sub_group_size = kDefaultSubGroupSize;  // zero3, in per-rank elements
  bool operator==(const TargetLayout&) const = default;
};

// The canonical names of [layouts §6], as kTargetGrammar spells them for people. Any other spelling is
// nullopt, so that one layout has exactly one name.
inline constexpr std::string_view kTargetGrammar =
    "zero{1,2,3}-dp<W>-{fp32,fp16,bf16}[-rr|-sg<N>] or bf16opt-dp<W>, W = 1..65536 (fake-layouts.md §6)";
std::optional<TargetLayout> parse_target(std::string_view name);
std::string target_name(const TargetLayout& layout);

// What the source's ds_config says beyond the index: the layout rules it was saved with.
struct SourceOptions {
  bool round_robin = false;  // zero_optimization.round_robin_gradients (stage 1/2 only)
  uint64_t sub_group_size = kDefaultSubGroupSize;
  std::optional<Precision> precision;  // from fp16/bf16 'enabled'; unset when ds_config says nothing
};
// Reads ds_config from the tag's (first) model-state file.
SourceOptions source_options(const TagIndex& index);
// The same, from that file's pickle already loaded.
SourceOptions source_options(const TagIndex& index, const pt::Node* model_root);
// Trainable parameters (indices into TagIndex::params) per param group, in param_group['params']
// order with a round robin undone [layouts §3.1]: the order a torch optimizer numbers them in.
std::vector<std::vector<uint32_t>> group_param_order(const TagIndex& index, const SourceOptions& source);
// The source's own layout name: a fake at it must equal the real files [layouts §6, §7.1].
TargetLayout source_layout(const TagIndex& index, const SourceOptions& options);
TargetLayout source_layout(const TagIndex& index);

// ZeRO-1/2 and BF16_Optimizer: one flat partitioned buffer per param group [layouts §3.1].
// With round_robin_gradients DeepSpeed reads the buffer two ways: its optimizer state, masters and
// param_slice_mappings place each parameter at `offsets` (param order), while the module weights
// are views at `flat_offsets` (round-robin order). Both are kept: a fake writes what DeepSpeed
// writes, so each module view shows whatever the masters hold at its offset.
struct FlatGroup {
  std::vector<uint32_t> params;        // param order (bit16_groups): indices into TagIndex::params
  std::vector<uint64_t> offsets;       // o_k in param order, as _link_all_hp_params accumulates them
  std::vector<uint32_t> flat;          // flat-buffer order (round_robin_bit16_groups): param_shapes[g]
  std::vector<uint64_t> flat_offsets;  // where each module weight of `flat` views the buffer
  uint64_t numel = 0;                  // N
  uint64_t padded = 0;                 // T = ceil(N / 2W') * 2W'
  uint64_t partition = 0;              // P = T / W'
};

// ZeRO-3: one sub-group of a param group [layouts §3.2].
struct SubGroup {
  int group = 0;
  std::vector<uint32_t> params;   // indices into TagIndex::params: param_shapes[s]
  std::vector<uint64_t> offsets;  // q_k: where each partition starts in the rank's flat tensor
  uint64_t numel = 0;             // S_s = sum of ceil(n_k / W'), the same on every rank
};

struct PartitionPlan {
  TargetLayout target;
  int num_groups = 0;
  std::vector<FlatGroup> groups;                        // zero1/2/bf16opt: one per param group
  std::vector<SubGroup> sub_groups;                     // zero3: global ids, group by group
  std::vector<std::vector<uint32_t>> group_sub_groups;  // zero3: param_groups[g]['params'], may be []
};

// DeepSpeed's fragment_address plus the parameter it belongs to.
struct FragmentAddress {
  uint32_t param = 0;        // index into TagIndex::params
  uint64_t param_start = 0;  // first element, in the flattened parameter
  uint64_t numel = 0;
  uint64_t start = 0;  // first element, in the rank's partition
  bool operator==(const FragmentAddress&) const = default;
};

// Rank r's partition of one ZeRO-1/2/BF16_Optimizer param group.
struct RankPartition {
  uint64_t partition = 0;   // P: length of the optimizer state tensors
  uint64_t valid = 0;       // L_r = clamp(N - rP, 0, P)
  uint64_t fp32_numel = 0;  // single_partition_of_fp32_groups[g]: L_r, BF16_Optimizer P
  uint64_t padding = 0;     // group_paddings[g]
  // param_slice_mappings[g], in param order; also what the partition's elements are, with or
  // without round robin (z1_ws2_fp32_pg2_rr: DeepSpeed's flat partitions follow its mappings).
  std::vector<FragmentAddress> mappings;
};
RankPartition rank_slice(const PartitionPlan& plan, const TagIndex& index, uint32_t rank, size_t group);

// Rank r's part of one ZeRO-3 sub-group: `numel` = S_s; the pieces hold real elements, the rest of
// each ceil(n/W') slot is zero padding.
struct RankSubGroup {
  uint64_t numel = 0;
  std::vector<FragmentAddress> pieces;
};
RankSubGroup rank_sub_group(const PartitionPlan& plan, const TagIndex& index, uint32_t rank, size_t sub_group);

// Throws zm::Error naming the reason and the spec section when the source cannot be presented
// at the target (e.g. a param group without a trainable parameter under ZeRO-1/2).
// Why no native layout (nor universal folder) of `index` is made, or "": a model-only save holds
// no optimizer state. (A source without model-state files gets made-up ones: ds/model_root.h.)
std::string native_layout_refusal(const TagIndex& index);
PartitionPlan plan_partitions(const TagIndex& index, const TargetLayout& target, const SourceOptions& source);
PartitionPlan plan_partitions(const TagIndex& index, const TargetLayout& target);

}  // namespace zm::ds
