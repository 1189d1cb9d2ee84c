#pragma once
// DeepSpeed's universal checkpoint files, written side: what ds_to_universal.py (and, for AutoEP,
// autoep_universal.py) saves per parameter and state in zero/<param>/<state>.pt, and in
// zero/optimizer_state.pt [formats §5.4, §6.6] [tp §10], typed from the
// index. ds/optim_file.h's sibling; the view names the files and turns the pickles into files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// One file of zero/<param>/: <state>.pt (a state the parameter's group keeps, fp32 first) or
// <value>.pt (a per-group value its group keeps: 'step', ...), state or value number k.
struct UniversalParamFile {
  enum Kind : uint8_t { State, Value } kind;
  size_t k;
};
// What zero/<param>/ holds, as ds_to_universal.py writes it: a file per state, then one per
// per-group value, but none of those of a tensor-parallel ZeRO-3 checkpoint [tp §6].
std::vector<UniversalParamFile> universal_param_files(const TagIndex& ix, const Param& p);
// Its name: "<state>.pt" or "<value>.pt".
std::string universal_file_name(const TagIndex& ix, const UniversalParamFile& f);

// zero/<param>/<state>.pt: {'cat_dim': 0, 'param': tensor} (a bare tensor when `bare`); of a
// parallel checkpoint, the keys merge_tp_slices writes (cat_dim, param_n_sub_params,
// sub_param_shape, vocab_tensor, is_expert_param), built in `a`.
const pt::Node* param_state_pickle(pt::Arena& a, const TagIndex& ix, const Param& p, size_t state, bool bare,
                                   const ExtentMap& map);
// zero/optimizer_state.pt: what every target stage's universal loader reads, without flat tensors.
const pt::Node* optimizer_state_pickle(pt::Arena& a, const TagIndex& ix, const ExtentMap& map);

}  // namespace zm::ds
