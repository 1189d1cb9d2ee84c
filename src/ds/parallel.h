#pragma once
// Tensor / pipeline parallel checkpoints [tp]:
// the (pp, tp, dp) grid of files, universal_checkpoint_info and the merge rule of each
// parameter. Private to src/ds.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "zeromount/ds/field.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/ds/tp_merge.h"
#include "zeromount/ds/tp_pattern.h"

namespace zm::ds {

// universal_checkpoint_info, decoded [tp §3]. Each category keeps its patterns in file order.
struct UcInfo {
  struct Category {
    std::string key;
    std::vector<TpPattern> patterns;
  };
  Category replicated{"tp_replicated_parameter_patterns", {}}, average{"parameter_to_average_patterns", {}},
      two_sub{"parameter_with_2_sub_params_cat_dim_0", {}}, row{"parameter_with_row_parallelism_patterns", {}},
      vocab{"vocabulary_parameter_patterns", {}}, pipeline_replicated{"pipeline_replicated_parameter_patterns", {}};
  std::vector<std::vector<TpPattern>> sub_params;                   // per SubParamRule, its patterns
  std::map<std::string, std::vector<std::vector<int64_t>>> widths;  // sub_param_shard_widths
  double version = 0;
  bool has_any_pattern() const;
};

// Decodes `info` into `uc`, and what the view re-emits (sub-parameter rules, vocabulary size,
// the pattern lists for inspect) into `index`. Refuses unsupported AutoTP layouts [tp §4.1].
UcInfo read_uc_info(TagIndex& index, const Field& info);

// Chooses each parameter's rule in merge_tp_slices' order and checks the merged shapes [tp §4.3];
// `strict` refuses patterns that no parameter used, as the converter does without --no_strict.
void assign_tp_rules(TagIndex& index, const UcInfo& uc, bool strict);

// One AutoEP layer's fused experts (<expert_key_prefix>.w1/.w2/.w3), from ds_autoep_layers.
struct AutoEpExpert {
  int64_t num_experts = 0, num_local = 0, ep_size = 1;
};
struct AutoEp {
  std::map<std::string, AutoEpExpert> experts;
  bool data_before_expert = false;  // ds_config.use_data_before_expert_parallelism
};

// AutoEP metadata of the first model-state file (ds_autoep_layers, else autoep_layers), checked as
// get_autoep_zero12_expert_param_info checks it; nullopt when there is none. Also stores the
// entries cut to the fields the converter re-saves in index.autoep_layers [tp §8].
std::optional<AutoEp> read_autoep(TagIndex& index, const Field& model_root);
// The dp ranks whose fragments make EP rank e's local experts, in order (_autoep_zero12_dp_ranks);
// refuses a dp size that ep does not divide, with DeepSpeed's message.
std::vector<int> autoep_dp_ranks(int e, int dp, int ep, bool data_before_expert);
// Makes `np` the [E_total, ...] join of its EP ranks' local experts: one TpSlice per EP rank, of the
// local shape, from the fragments `stored` (per state, every dp rank's, Fragment::rank = dp rank).
void merge_autoep_expert(const TagIndex& index, Param& np, const Shape& local,
                         const std::vector<std::vector<Fragment>>& stored, const AutoEpExpert& x,
                         bool data_before_expert);

// index_tag() for a checkpoint with more than one model-parallel file, layer files or expert files.
void index_parallel(TagIndex& index, bool strict);

// Python's repr of a list of str, for messages that read like DeepSpeed's.
std::string py_str_list(const std::vector<std::string>& v);

// The tag folder holds files of more than one model-parallel rank, layer files or expert files.
bool is_parallel_tag(const std::string& dir);
}  // namespace zm::ds
