#pragma once
// The index of one ZeRO checkpoint tag: for every parameter and every optimizer state, the byte
// ranges of shard files that, concatenated in rank order, make the full unpadded flat tensor.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeromount/ds/precision.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// A shard file and its identity when indexed; Extent::file indexes TagIndex::shards.
struct Shard {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  uint64_t pickle_hash = 0;
};

// One contiguous piece of a flat state in one shard.
struct Fragment {
  uint32_t rank = 0;
  uint64_t start = 0;  // first element, in the parameter's flat order
  uint64_t numel = 0;
  pt::Extent extent;  // its bytes
};

// A value of one (sub-)group's optimizer state that is not partitioned with the master weights,
// as the source optimizer stored it: 'step' (a 0-d tensor for torch Adam, an int for others) or
// any other such key (an int counter, a shape-[1] tensor). Every file that holds the group gets
// it whole, as DeepSpeed treats any state tensor whose shape is not the flat partition's.
struct StepValue {
  enum Kind { None, Tensor, Int, Float } kind = None;
  pt::DType dtype = pt::DType::F32;
  std::vector<int64_t> shape;  // Tensor: as stored ({} for 0-d)
  pt::Extent extent;           // Tensor
  int64_t i = 0;
  double f = 0;
};

// ZeRO-3 splits n elements into W partitions of ceil(n/W) each [formats §4.2]; the last ones pad.
// The one definition of that padding arithmetic: the index, its fragments and the cache use it.
inline uint64_t zero3_partition(uint64_t n, uint64_t W) {
  return (n + W - 1) / W;
}
// Rank r of partitions of `part` elements holds this many real ones.
inline uint64_t valid_on_rank(uint64_t n, uint64_t part, uint64_t rank) {
  const uint64_t begin = part * rank;
  return begin >= n ? 0 : (n - begin < part ? n - begin : part);
}

// How a parameter's tensor-parallel slices make its universal tensor: ds_to_universal.py's
// merge_tp_slices rules [tp §4.3], chosen once at index time.
enum class TpRule : uint8_t {
  Cat,           // rules 5 / 6: torch.cat on cat_dim (1 row-parallel, 0 default); also T = 1
  Replicated,    // rule 1: slice 0 (the others must be equal)
  Averaged,      // rule 2: sum(slices) / T
  TwoSubParams,  // rule 3: SwiGLU halves, cat on dim 0
  SubParams,     // rule 4: parameter_with_sub_params
  Expert,        // AutoEP: each EP rank's local experts (`slices`, one per EP rank), cat on dim 0
};
const char* tp_rule_name(TpRule r);

// One tensor-parallel rank's local tensor L_t: its shape and, per state, its ZeRO-DP pieces.
struct TpSlice {
  std::vector<int64_t> shape;
  std::vector<std::vector<Fragment>> stored;  // [state] -> pieces in dp order
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  int group = 0;        // optimizer param group
  int sub_group = -1;   // stage-3 sub-group; -1 for stage 1/2
  int step = -1;        // index into TagIndex::scalars: its group (stage 1/2) or sub-group (stage 3)
  uint64_t offset = 0;  // stage 3: where its partition starts in its sub-group's flat tensors
  // Stage 1/2: stored[k] = the pieces of state TagIndex::state_names[k], in rank order, as each
  // rank's param_slice_mappings place them. Stage 3 computes them (TagIndex::fragments).
  std::vector<std::vector<Fragment>> stored;
  // Parallel checkpoints (TagIndex::parallel()): the slices and the rule that merges them. `shape`
  // is then the universal shape (after a vocabulary cut), `stored` is empty.
  std::vector<TpSlice> slices;
  TpRule rule = TpRule::Cat;
  int cat_dim = 0;
  bool vocab = false;                            // vocabulary_parameter_patterns: rows cut to original_vocab_size
  int sub_rule = -1;                             // SubParams: index into TagIndex::sub_param_rules
  std::vector<std::vector<int64_t>> sub_widths;  // SubParams: per sub-parameter, per tp rank
  uint64_t merged_numel = 0;                     // before the vocabulary cut (the file's storage)
  int64_t ep_num_experts = 0;                    // Expert: num_experts of its ds_autoep_layers entry
};

// One entry of universal_checkpoint_info's parameter_with_sub_params, re-emitted as SubparamShape.
struct SubParamRule {
  std::vector<std::string> patterns;
  std::vector<std::vector<int64_t>> shape;  // per dimension; at partition_dim the sub-parameter sizes
  std::vector<bool> is_tuple;               // which entries were tuples (-1 / sizes otherwise)
  int partition_dim = 0;
};

// A tensor stored whole (or as rank partitions) in model-state files: buffers, frozen params.
struct PlainTensor {
  std::string name;
  pt::DType dtype = pt::DType::F32;
  std::vector<int64_t> shape;
  std::vector<pt::Extent> data;  // concatenated, then cut to numel
  uint64_t numel() const { return pt::numel(shape); }
};

// Shard extents of elements [from, from + count) of a flat state made of `frags` (in element
// order), appended to `out`, runs adjacent in one shard read as one; throws EIO when the
// fragments do not cover them.
void element_extents(const std::vector<Fragment>& frags, uint64_t from, uint64_t count, uint64_t element_size,
                     std::vector<pt::Extent>& out);
std::vector<pt::Extent> element_extents(const std::vector<Fragment>& frags, uint64_t from, uint64_t count,
                                        uint64_t element_size);

struct TagIndex;
// A parallel parameter's whole merged state (Param::merged_numel elements: the storage of a
// vocabulary tensor) as extents; nullopt for an averaged parameter, whose bytes must be computed.
// Replicated: slice 0. Defined with the merge rules' run generator (tp_param.cpp).
std::optional<std::vector<pt::Extent>> merged_extents(const TagIndex& ix, const Param& p, size_t state);

// What a tag's optimizer files say about all of it: the stage and the optimizer class that saved
// it, its precisions and loss scaler, the names of its states and its per-group values. A parallel
// source takes them, whole, from its first (pp, tp) cell (index_parallel.cpp).
struct OptimizerGlobals {
  int stage = 0;
  OptimizerClass optimizer = OptimizerClass::DeepSpeedZeroOptimizer;
  bool bf16_optimizer = false;              // optimizer == BF16_Optimizer (kept for the view)
  pt::DType master_dtype = pt::DType::F32;  // fp32 partitions and optimizer states
  pt::DType module_dtype = pt::DType::F32;  // training precision: the model-state module weights
  // ZeRO-1/2 saved with elastic_checkpoint: base_optimizer_state is a list of per-group states cut
  // to each rank's valid elements, without param_groups (DeepSpeed keeps the loading engine's).
  bool elastic = false;
  LossScaler loss_scaler;  // from rank 0's optimizer file
  std::string ds_version;
  // "fp32" first, then the optimizer's own keys partitioned like it (exp_avg, exp_avg_sq, ...).
  std::vector<std::string> state_names;
  // The optimizer's other per-group keys ('step', ...), in rank 0's order; empty for an optimizer
  // that never stepped (its state is {}), as state_names is then just "fp32".
  std::vector<std::string> scalar_names;
  // scalars[s][k]: the value of scalar_names[k] in group s (stage 1/2) or sub-group s (stage 3).
  std::vector<std::vector<StepValue>> scalars;
  int num_groups = 0;
};

// Which reader made a TagIndex, the description of one saved training state every view reads.
enum class SourceKind : uint8_t {
  DeepSpeed,  // ZeRO-1/2/3, BF16_Optimizer: the fields below as DeepSpeed's files have them
  Dcp,        // a DCP folder (dcp_source.h): no ZeRO stage (0), no model-state files
};

struct TagIndex : OptimizerGlobals {
  std::string tag;  // folder name, e.g. global_step3
  std::string dir;  // absolute path of the tag folder
  SourceKind source = SourceKind::DeepSpeed;
  std::string source_style;     // Dcp: "fsdp2", "torchtitan", "hf-fsdp", "model-only"
  bool optimizer_saved = true;  // false: a model-only save, whose params keep their weights alone
  int dp = 0;                   // data-parallel (ZeRO partition) size W
  int mp = 1;
  int tp = 1, pp = 1;  // the (pp, tp, dp) grid; dp is `dp`
  int ep = 1;          // AutoEP: the largest autoep_size of its layers
  // AutoEP: ds_autoep_layers cut to the fields the converter re-saves into the model-state files'
  // universal_checkpoint_info [tp §8]; null for every other source.
  const pt::Node* autoep_layers = nullptr;
  bool autoep() const { return autoep_layers != nullptr; }
  bool parallel() const { return tp > 1 || pp > 1 || autoep(); }
  std::vector<std::string> mp_files;  // parallel: the model-state files the converter copies, sorted
  std::vector<SubParamRule> sub_param_rules;
  int64_t original_vocab_size = -1;  // universal_checkpoint_info, when present
  // For inspect: each pattern list of universal_checkpoint_info, by key, in file order.
  std::vector<std::pair<std::string, std::vector<std::string>>> patterns;
  StepValue::Kind step_kind = StepValue::None;  // how the optimizer stores 'step', the same in every group
  std::string optim_prefix;                     // "", "bf16_" or "fp16_"
  // Where param groups keep different states (DeepSpeed's Muon: 'momentum_buffer' in its group,
  // Adam's moments and 'step' in the other), group_states[g][k] says whether group g keeps
  // state_names[k] (a group's missing scalars are StepValue::None). Empty: every group keeps all.
  std::vector<std::vector<bool>> group_states;
  // whole_states[k]: state_names[k] is kept whole per parameter, not cut at the partition edge:
  // Muon's momentum_buffer, of which every rank holds the whole buffer of each parameter its
  // partition touches (stage_1_and_2.py, get_flat_partition). Param::stored[k] is then one
  // Fragment, the first holder's copy. Empty: none.
  std::vector<bool> whole_states;
  // Whether group g keeps state k (the master weights, k = 0, always), and p's group.
  bool group_has(size_t g, size_t k) const { return k == 0 || group_states.empty() || group_states.at(g).at(k); }
  bool has(const Param& p, size_t k) const { return group_has(size_t(p.group), k); }
  bool whole(size_t k) const { return k < whole_states.size() && whole_states[k]; }
  std::vector<Param> params;
  // Per-group value scalar_names[k] of group (or sub-group) g: nullptr where that group keeps none
  // (a Muon group's 'step', a source that never stepped, g < 0: a parameter outside the optimizer).
  const StepValue* value(int64_t g, size_t k) const;
  // 'step' of group (or sub-group) s; nullptr when the optimizer (or that group) keeps none.
  const StepValue* step(size_t s) const;
  // The run's step count: the first group's 'step' (a Muon group keeps none); nullptr if none has.
  const StepValue* run_step() const;
  // Whether the optimizer saved any per-group state ({} before the first step).
  bool has_state() const { return state_names.size() > 1 || !scalar_names.empty(); }
  std::vector<PlainTensor> frozen;  // frozen params as zero_to_fp32 emits them (stage 1 and BF16: none)
  // Stage 1/2 and BF16_Optimizer: every frozen param as the model-state 'module' holds it, in
  // its stored dtype (module_dtype), for views of the training-precision module. Stage 3: empty.
  std::vector<PlainTensor> module_frozen;
  // Stage 1/2 and BF16_Optimizer: module_weights[k] is params[k]'s weight in the model-state
  // file's 'module', in training precision (module_dtype). Empty for stage 3 (placeholders only).
  std::vector<PlainTensor> module_weights;
  std::vector<PlainTensor> buffers;  // as rank 0's model-state file holds them
  // Stage 3 with buffers: rank r's own (rank_buffers[r], in the order of `buffers`). Each rank
  // updates its buffers itself, so their values differ (a running mean); empty otherwise.
  std::vector<std::vector<PlainTensor>> rank_buffers;
  std::vector<std::pair<std::string, std::string>> shared;  // alias -> canonical
  std::vector<Shard> shards;
  std::vector<std::string> model_files;  // stage 1/2: mp_rank_00; stage 3: one per dp rank
  // Small optimizer-level values copied from rank 0, for zero/optimizer_state.pt.
  pt::Arena arena;
  const pt::Node* optim_meta = nullptr;  // dict: loss_scaler, dynamic_loss_scale, overflow, clip_grad, zero_stage, ...
  // The source's param groups (with 'params'); elastic sources saved none: one {'params': [g]} per group.
  const pt::Node* param_groups = nullptr;
  // A DCP source's own scheduler state (torchtitan's `lr_scheduler` items, the Trainer's
  // scheduler.pt), in `arena`; null where it keeps none. DeepSpeed's is in its model-state file.
  // (DCP indexes are not cached: index_cache.cpp does not store it.)
  const pt::Node* lr_scheduler = nullptr;

  // Stage 3 layout, so that no per-(parameter, rank) record is kept: element 0 of state k of
  // sub-group s in rank r's optimizer file is at byte flat_offsets[(r * sub_groups + s) * states + k]
  // of shards[optim_shard[r]].
  size_t sub_groups = 0;
  std::vector<uint64_t> flat_offsets;
  std::vector<uint32_t> optim_shard;

  // The pieces of state `state` of `p`, in rank order; concatenated they are the flat tensor.
  // Parallel: the merged universal tensor (cut to `shape`), when the merge only moves bytes;
  // an averaged parameter has none and throws (its bytes are computed: ds/state_bytes.h).
  std::vector<Fragment> fragments(const Param& p, size_t state) const;
  // Only the pieces that hold some of elements [from, from + count), unclipped and in the same
  // order: what elements() of a range needs, in O(pieces returned + log pieces) instead of one
  // entry per rank (a ZeRO-3 source of W ranks has W pieces per parameter).
  std::vector<Fragment> fragments(const Param& p, size_t state, uint64_t from, uint64_t count) const;
  uint64_t state_bytes() const;  // sum over params and states
  std::vector<Fragment> zero3_fragments(const Param& p, size_t state, uint64_t from, uint64_t count) const;
  const Param* find(const std::string& name) const;
};

}  // namespace zm::ds
