// Reading what a checkpoint says about precision: the loss scaler object, and the one check that
// every tensor of a group has the group's dtype.
#include "zeromount/ds/precision.h"

#include <algorithm>
#include <iterator>

#include "zeromount/ds/field.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"

namespace zm::ds {

std::string_view optimizer_class_name(OptimizerClass c) {
  switch (c) {
    case OptimizerClass::DeepSpeedZeroOptimizer:
      return "DeepSpeedZeroOptimizer";
    case OptimizerClass::DeepSpeedZeroOptimizer_Stage3:
      return "DeepSpeedZeroOptimizer_Stage3";
    case OptimizerClass::BF16_Optimizer:
      return "BF16_Optimizer";
  }
  return "?";
}

std::string_view loss_scaler_class_name(LossScaler::Kind k) {
  switch (k) {
    case LossScaler::None:
      return "";
    case LossScaler::Static:
      return "LossScaler";
    case LossScaler::Dynamic:
      return "DynamicLossScaler";
  }
  return "?";
}

void require_dtype(const Field& tensor, pt::DType want, const std::string& whose) {
  const pt::DType have = tensor.as_tensor().dtype;
  if (have != want)
    tensor.fail("is " + std::string(pt::dtype_name(have)) + " while " + whose + " are " +
                std::string(pt::dtype_name(want)) + "; mixed dtypes within a group are not supported");
}

namespace {

constexpr const char* kModule = "deepspeed.runtime.fp16.loss_scaler";
// The attributes each class sets in __init__ (DeepSpeed 0.19); anything else is refused rather
// than silently dropped when the view re-emits the scaler.
constexpr const char* kStaticFields[] = {"cur_scale", "dynamic"};
constexpr const char* kDynamicFields[] = {"cur_scale",
                                          "dynamic",
                                          "cur_iter",
                                          "last_overflow_iter",
                                          "scale_factor",
                                          "scale_window",
                                          "min_scale",
                                          "delayed_shift",
                                          "cur_hysteresis",
                                          "consecutive_hysteresis",
                                          "raise_error_at_min_scale",
                                          "dtype"};
// Added after the first DynamicLossScaler releases: older pickles lack them.
constexpr const char* kOptionalFields[] = {"raise_error_at_min_scale", "dtype"};

template <size_t N>
bool listed(const char* const (&names)[N], const std::string& s) {
  return std::find_if(std::begin(names), std::end(names), [&](const char* n) { return s == n; }) != std::end(names);
}

double number(const Field& f) {
  if (f.is(pt::Kind::Int)) return double(f.node()->i);
  if (f.is(pt::Kind::Float)) return f.node()->f;
  f.fail("expected a number, found " + pt::repr(f.node()));
}

bool boolean(const Field& f) {
  if (!f.is(pt::Kind::Bool)) f.fail("expected a bool, found " + pt::repr(f.node()));
  return f.node()->b;
}

// DynamicLossScaler.dtype pickles as GLOBAL 'torch float16'.
pt::DType torch_dtype(const Field& f) {
  const pt::Node* n = f.node();
  if (n->is_global("torch", "float16")) return pt::DType::F16;
  if (n->is_global("torch", "bfloat16")) return pt::DType::BF16;
  if (n->is_global("torch", "float32")) return pt::DType::F32;
  f.fail("expected torch.float16, torch.bfloat16 or torch.float32, found " + pt::repr(n));
}

// Refuses attributes the class does not have, and missing required ones.
template <size_t N>
void check_fields(const Field& scaler, const char* const (&allowed)[N]) {
  const pt::Node* st = scaler.node()->state;
  if (!st || st->kind != pt::Kind::Dict) scaler.fail("loss scaler has no attribute dict");
  const std::string cls(
      loss_scaler_class_name(scaler.node()->callee->s2 == "LossScaler" ? LossScaler::Static : LossScaler::Dynamic));
  for (const auto& [k, v] : st->entries) {
    if (k->kind != pt::Kind::Str) scaler.fail("loss scaler attribute names must be str");
    if (!listed(allowed, k->s))
      Field(v, scaler.file(), scaler.path() + "." + k->s)
          .fail("unexpected " + cls + " field (not one DeepSpeed 0.19 writes); refusing rather than dropping it");
  }
  for (const char* name : allowed)
    if (!st->get(name) && !listed(kOptionalFields, name))
      Field(st, scaler.file(), scaler.path() + "." + name).fail("missing " + cls + " field");
}

}  // namespace

LossScaler read_loss_scaler(const Field& osd) {
  LossScaler ls;
  const auto f = osd.find("loss_scaler");
  if (!f || f->is_none()) return ls;
  const pt::Node* n = f->node();
  if (!n->is(pt::Kind::Object) || !n->callee || n->callee->kind != pt::Kind::Global || n->callee->s != kModule)
    f->fail("expected a " + std::string(kModule) + " object, found " + pt::repr(n));
  if (n->callee->s2 == "LossScaler") {
    ls.kind = LossScaler::Static;
    check_fields(*f, kStaticFields);
  } else if (n->callee->s2 == "DynamicLossScaler") {
    ls.kind = LossScaler::Dynamic;
    check_fields(*f, kDynamicFields);
  } else {
    f->fail("unknown loss scaler class " + n->callee->s2);
  }
  ls.cur_scale = number(f->attr("cur_scale"));
  ls.dynamic = boolean(f->attr("dynamic"));
  if (ls.dynamic != (ls.kind == LossScaler::Dynamic))
    f->attr("dynamic").fail("disagrees with the class " + n->callee->s2);
  if (ls.kind == LossScaler::Static) return ls;
  auto integer = [&](const char* name) {
    const Field v = f->attr(name);
    if (!v.is(pt::Kind::Int)) v.fail("expected an int, found " + pt::repr(v.node()));
    return v.node()->i;
  };
  ls.cur_iter = integer("cur_iter");
  ls.last_overflow_iter = integer("last_overflow_iter");
  ls.scale_factor = number(f->attr("scale_factor"));
  ls.scale_window = integer("scale_window");
  ls.min_scale = number(f->attr("min_scale"));
  ls.delayed_shift = integer("delayed_shift");
  ls.cur_hysteresis = integer("cur_hysteresis");
  ls.consecutive_hysteresis = boolean(f->attr("consecutive_hysteresis"));
  if (n->state->get("raise_error_at_min_scale"))
    ls.raise_error_at_min_scale = boolean(f->attr("raise_error_at_min_scale"));
  if (n->state->get("dtype")) ls.dtype = torch_dtype(f->attr("dtype"));
  return ls;
}

const pt::Node* loss_scaler_pickle(pt::Arena& a, const LossScaler& s) {
  namespace build = pt::build;
  pt::Node* st = build::dict(a);
  build::add(st, a, "cur_scale", build::real(a, s.cur_scale));
  build::add(st, a, "dynamic", build::boolean(a, s.dynamic));
  if (s.kind != LossScaler::Dynamic) return build::new_object(a, kModule, "LossScaler", st);
  build::add(st, a, "cur_iter", a.make_int(s.cur_iter));
  build::add(st, a, "last_overflow_iter", a.make_int(s.last_overflow_iter));
  build::add(st, a, "scale_factor", build::real(a, s.scale_factor));
  build::add(st, a, "scale_window", a.make_int(s.scale_window));
  // min_loss_scale comes from the config, where DeepSpeed's default is the int 1.
  const bool whole = s.min_scale == double(int64_t(s.min_scale));
  build::add(st, a, "min_scale", whole ? a.make_int(int64_t(s.min_scale)) : build::real(a, s.min_scale));
  build::add(st, a, "delayed_shift", a.make_int(s.delayed_shift));
  build::add(st, a, "cur_hysteresis", a.make_int(s.cur_hysteresis));
  build::add(st, a, "consecutive_hysteresis", build::boolean(a, s.consecutive_hysteresis));
  build::add(st, a, "raise_error_at_min_scale", build::boolean(a, s.raise_error_at_min_scale));
  build::add(st, a, "dtype", a.make_global("torch", std::string(pt::dtype_name(s.dtype))));
  return build::new_object(a, kModule, "DynamicLossScaler", st);
}

}  // namespace zm::ds
