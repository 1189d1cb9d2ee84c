#pragma once
// DeepSpeed's universal checkpoint files, written side: what ds_to_universal.py (and, for AutoEP,
// autoep_universal.py) saves per parameter and state in zero/<param>/<state>.pt, and in
// zero/optimizer_state.pt [formats §5.4, §6.6] [tp §10], typed from the
// index. ds/optim_file.h's sibling; the view names the files and turns the pickles into files.
#include <cstddef>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

// zero/<param>/<state>.pt: {'cat_dim': 0, 'param': tensor} (a bare tensor when `bare`); of a
// parallel checkpoint, the keys merge_tp_slices writes (cat_dim, param_n_sub_params,
// sub_param_shape, vocab_tensor, is_expert_param), built in `a`.
const pt::Node* param_state_pickle(pt::Arena& a, const TagIndex& ix, const Param& p, size_t state, bool bare,
                                   const ExtentMap& map);
// zero/optimizer_state.pt: what every target stage's universal loader reads, without flat tensors.
const pt::Node* optimizer_state_pickle(pt::Arena& a, const TagIndex& ix, const ExtentMap& map);

}  // namespace zm::ds
