#pragma once
// What a checkpoint says about precision: which optimizer wrapper saved it and the loss scaler it
// pickled. The view needs both to make files a target engine of the same class accepts.
#include <cstdint>
#include <string>
#include <string_view>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/value.h"

namespace zm::ds {

class Field;  // field.h

// The DeepSpeed class whose state_dict() wrote the optimizer files [formats §3.2].
enum class OptimizerClass : uint8_t {
  DeepSpeedZeroOptimizer,         // ZeRO-1/2, stage_1_and_2.py
  DeepSpeedZeroOptimizer_Stage3,  // ZeRO-3, stage3.py
  BF16_Optimizer,                 // bf16_optimizer.py: ZeRO-1 layout, no zero_stage or loss-scale keys
};
std::string_view optimizer_class_name(OptimizerClass c);  // "BF16_Optimizer", as the class is named

// deepspeed.runtime.fp16.loss_scaler.{LossScaler, DynamicLossScaler}, field by field.
struct LossScaler {
  enum Kind : uint8_t {
    None,     // BF16_Optimizer pickles no scaler
    Static,   // LossScaler: cur_scale, dynamic=False
    Dynamic,  // DynamicLossScaler: every field below
  } kind = None;
  double cur_scale = 1;
  bool dynamic = false;
  // DynamicLossScaler only (the defaults are DeepSpeed's).
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  double scale_factor = 2;
  int64_t scale_window = 1000;
  double min_scale = 1;
  int64_t delayed_shift = 2;
  int64_t cur_hysteresis = 2;
  bool consecutive_hysteresis = false;
  bool raise_error_at_min_scale = true;
  pt::DType dtype = pt::DType::F16;  // the fp16 dtype the scaler checks for overflow
};
std::string_view loss_scaler_class_name(LossScaler::Kind k);  // "", "LossScaler", "DynamicLossScaler"
// A DynamicLossScaler's first scale: 2**initial_scale_power, DeepSpeed's default power 16.
inline constexpr double kInitialDynamicScale = 65536.0;
// The scaler as DeepSpeed pickles it: NEWOBJ of its class, BUILD with the fields its __init__
// sets, in that order. nullptr-free: a None kind is pickled as a static scale of 1.
const pt::Node* loss_scaler_pickle(pt::Arena& a, const LossScaler& s);

// Read side, for the indexers. optimizer_state_dict.loss_scaler, field by field; LossScaler::None
// when absent (BF16_Optimizer).
LossScaler read_loss_scaler(const Field& osd);
// The one mixed-dtype check: `tensor` must be `want`, the dtype of `whose` (e.g. "the master weights").
void require_dtype(const Field& tensor, pt::DType want, const std::string& whose);

}  // namespace zm::ds
