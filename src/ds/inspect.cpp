#include "zeromount/ds/inspect.h"

#include "zeromount/pt/text.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "zeromount/pt/convert.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/file.h"

namespace zm::ds {

using pt::human_bytes;
using pt::json_escape;
using pt::pad;
using pt::shape_text;
using pt::with_commas;

double step_number(const TagIndex& index, const StepValue& step) {
  switch (step.kind) {
    case StepValue::Int:
      return double(step.i);
    case StepValue::Float:
      return step.f;
    case StepValue::None:
      return 0;
    case StepValue::Tensor:
      break;
  }
  pt::File f(index.shards.at(step.extent.file).path);
  unsigned char b[8] = {};
  f.read_exact(step.extent.offset, b, step.extent.length, "step");
  return pt::element_value(b, step.dtype);
}

namespace {

// "0-1", "3", "0,2-5": the dp ranks that hold a piece of a parameter.
std::string ranks_text(const TagIndex& ix, const Param& p) {
  std::vector<uint32_t> r;
  for (const auto& f : ix.fragments(p, 0)) r.push_back(f.rank);
  std::string s;
  for (size_t k = 0; k < r.size();) {
    size_t e = k;
    while (e + 1 < r.size() && r[e + 1] == r[e] + 1) ++e;
    s += (s.empty() ? "" : ",") + std::to_string(r[k]) + (e > k ? "-" + std::to_string(r[e]) : "");
    k = e + 1;
  }
  return s;
}

// A parallel parameter's merge rule as ds_to_universal.py names it [tp §4.3].
std::string rule_text(const Param& p) {
  std::string s = tp_rule_name(p.rule);
  if (p.rule == TpRule::Cat) s += " dim " + std::to_string(p.cat_dim);
  return p.vocab ? s + ", vocabulary" : s;
}

std::string loss_scaler_json(const LossScaler& ls) {
  if (ls.kind == LossScaler::None) return "null";
  std::string s = "{\"class\":\"" + std::string(loss_scaler_class_name(ls.kind)) +
                  "\",\"cur_scale\":" + pt::format_double(ls.cur_scale) +
                  ",\"dynamic\":" + (ls.dynamic ? "true" : "false");
  if (ls.kind == LossScaler::Dynamic)
    s += ",\"cur_iter\":" + std::to_string(ls.cur_iter) +
         ",\"last_overflow_iter\":" + std::to_string(ls.last_overflow_iter) +
         ",\"scale_factor\":" + pt::format_double(ls.scale_factor) +
         ",\"scale_window\":" + std::to_string(ls.scale_window) + ",\"min_scale\":" + pt::format_double(ls.min_scale) +
         ",\"delayed_shift\":" + std::to_string(ls.delayed_shift) +
         ",\"cur_hysteresis\":" + std::to_string(ls.cur_hysteresis) +
         ",\"consecutive_hysteresis\":" + (ls.consecutive_hysteresis ? "true" : "false") +
         ",\"raise_error_at_min_scale\":" + (ls.raise_error_at_min_scale ? "true" : "false") + ",\"dtype\":\"" +
         std::string(pt::dtype_name(ls.dtype)) + "\"";
  return s + "}";
}

const char* step_kind_name(StepValue::Kind k) {
  switch (k) {
    case StepValue::Tensor:
      return "tensor";
    case StepValue::Int:
      return "int";
    case StepValue::Float:
      return "float";
    case StepValue::None:
      break;
  }
  return "none";
}

}  // namespace

std::string stage_text(const TagIndex& ix) {
  if (ix.source == SourceKind::Dcp) return "none: a DCP save (" + ix.source_style + ")";
  if (ix.bf16_optimizer) return "BF16_Optimizer (ZeRO-1 layout)";
  std::string s = "ZeRO-" + std::to_string(ix.stage);
  if (ix.stage == 3) s += " (" + std::to_string(ix.scalars.size()) + " sub-groups)";
  return s;
}

std::string loss_scaler_text(const LossScaler& ls) {
  if (ls.kind == LossScaler::None) return "none (BF16_Optimizer saves none)";
  std::string s = std::string(loss_scaler_class_name(ls.kind)) + " (cur_scale " + pt::format_double(ls.cur_scale);
  if (ls.kind == LossScaler::Dynamic)
    s += ", cur_iter " + std::to_string(ls.cur_iter) + ", last_overflow_iter " + std::to_string(ls.last_overflow_iter) +
         ", scale_factor " + pt::format_double(ls.scale_factor) + ", scale_window " + std::to_string(ls.scale_window) +
         ", min_scale " + pt::format_double(ls.min_scale) + ", delayed_shift " + std::to_string(ls.delayed_shift) +
         ", cur_hysteresis " + std::to_string(ls.cur_hysteresis) + ", consecutive_hysteresis " +
         (ls.consecutive_hysteresis ? "true" : "false") + ", raise_error_at_min_scale " +
         (ls.raise_error_at_min_scale ? "true" : "false") + ", dtype " + std::string(pt::dtype_name(ls.dtype));
  return s + ")";
}

uint64_t trainable_numel(const TagIndex& ix) {
  uint64_t numel = 0;
  for (const auto& p : ix.params) numel += p.numel;
  return numel;
}

std::string states_text(const TagIndex& ix) {
  if (!ix.has_state()) return "none (saved before the first step)";
  std::string states;
  for (size_t k = 1; k < ix.state_names.size(); ++k) {
    states += (k > 1 ? ", " : "") + ix.state_names[k];
    if (ix.whole(k)) states += " (whole per parameter on every rank it spans: Muon)";
    if (ix.group_states.empty()) continue;
    std::string groups;
    for (size_t g = 0; g < ix.group_states.size(); ++g)
      if (ix.group_states[g][k]) groups += (groups.empty() ? "" : ",") + std::to_string(g);
    states += " [group " + groups + "]";
  }
  return states;
}

std::string inspect_text(const TagIndex& ix) {
  const uint64_t numel = trainable_numel(ix);
  std::string o;
  auto line = [&](const char* k, const std::string& v) { o += pad(k, 12) + v + "\n"; };
  line("checkpoint", ix.dir);
  line("tag", ix.tag);
  line("stage", stage_text(ix));
  line("dp ranks", std::to_string(ix.dp));
  if (ix.parallel())
    line("grid", "pp " + std::to_string(ix.pp) + " x tp " + std::to_string(ix.tp) + " x dp " + std::to_string(ix.dp) +
                     (ix.autoep() ? ", AutoEP ep " + std::to_string(ix.ep) : ""));
  if (ix.source == SourceKind::Dcp)
    line("optimizer", ix.optimizer_saved
                          ? std::string("torch's, by name (step stored as ") + step_kind_name(ix.step_kind) + ")"
                          : std::string("none saved (the model only)"));
  else
    line("optimizer",
         std::string(optimizer_class_name(ix.optimizer)) + " (step stored as " + step_kind_name(ix.step_kind) + ")");
  line("training", std::string(pt::dtype_name(ix.module_dtype)) + " module weights");
  line("dtype", std::string(pt::dtype_name(ix.master_dtype)) + " master weights; optimizer states: " + states_text(ix));
  std::string per_group;
  for (const auto& k : ix.scalar_names) per_group += (per_group.empty() ? "" : ", ") + k;
  if (!per_group.empty()) line("per group", per_group);
  if (ix.elastic) line("elastic", "yes (elastic_checkpoint: per-group states as a list, no param_groups)");
  if (ix.source == SourceKind::DeepSpeed) line("loss scale", loss_scaler_text(ix.loss_scaler));
  line("groups", std::to_string(ix.num_groups) + " param groups");
  if (const StepValue* step = ix.run_step()) line("step", pt::format_double(step_number(ix, *step)));
  line("params", with_commas(ix.params.size()) + " trainable (" + with_commas(numel) + " elements, " +
                     human_bytes(ix.state_bytes()) + " of fp32 + optimizer state), " +
                     std::to_string(ix.frozen.size()) + " frozen, " + std::to_string(ix.buffers.size()) + " buffers, " +
                     std::to_string(ix.shared.size()) + " shared");
  line("shards", std::to_string(ix.shards.size()) + " files read (pickles only)");
  if (!ix.ds_version.empty()) line("ds_version", ix.ds_version);
  o += "\n";
  size_t wn = 4, ws = 5;
  for (const auto& p : ix.params) {
    wn = std::max(wn, p.name.size());
    ws = std::max(ws, shape_text(p.shape).size());
  }
  // A parallel parameter lives on every dp rank of its cells: its merge rule says more.
  o += pad("name", wn + 2) + pad("shape", ws + 2) + pad("numel", 14) + pad("group", 7) +
       (ix.parallel() ? "merge rule\n" : "ranks\n");
  for (const auto& p : ix.params)
    o += pad(p.name, wn + 2) + pad(shape_text(p.shape), ws + 2) + pad(with_commas(p.numel), 14) +
         pad(std::to_string(p.group) + (p.sub_group >= 0 ? "/" + std::to_string(p.sub_group) : ""), 7) +
         (ix.parallel() ? rule_text(p) : ranks_text(ix, p)) + "\n";
  if (ix.parallel()) {
    o += "\nuniversal_checkpoint_info patterns" + std::string(ix.patterns.empty() ? ": none\n" : "\n");
    for (const auto& [key, list] : ix.patterns)
      for (const auto& pat : list) o += "  " + pad(key, 42) + pat + "\n";
  }
  for (const auto& f : ix.frozen) o += pad(f.name, wn + 2) + pad(shape_text(f.shape), ws + 2) + "(frozen)\n";
  if (ix.frozen.empty())  // stage 1 and BF16_Optimizer keep frozen parameters only in 'module'
    for (const auto& f : ix.module_frozen)
      o += pad(f.name, wn + 2) + pad(shape_text(f.shape), ws + 2) + "(frozen, module only)\n";
  return o;
}

std::string inspect_json(const TagIndex& ix) {
  using pt::json_escape;
  std::string o =
      "{\"format\":1,\"tag\":" + json_escape(ix.tag) + ",\"dir\":" + json_escape(ix.dir) +
      ",\"source\":" + json_escape(ix.source == SourceKind::Dcp ? "dcp:" + ix.source_style : "deepspeed") +
      ",\"stage\":" + std::to_string(ix.stage) + ",\"bf16_optimizer\":" + (ix.bf16_optimizer ? "true" : "false") +
      ",\"dp\":" + std::to_string(ix.dp) + ",\"tp\":" + std::to_string(ix.tp) + ",\"pp\":" + std::to_string(ix.pp) +
      ",\"ep\":" + std::to_string(ix.ep) + ",\"dtype\":\"" + std::string(pt::dtype_name(ix.master_dtype)) +
      "\",\"optimizer\":\"" + std::string(optimizer_class_name(ix.optimizer)) + "\",\"training_dtype\":\"" +
      std::string(pt::dtype_name(ix.module_dtype)) + "\",\"master_dtype\":\"" +
      std::string(pt::dtype_name(ix.master_dtype)) + "\",\"step_type\":\"" + step_kind_name(ix.step_kind) +
      "\",\"loss_scaler\":" + loss_scaler_json(ix.loss_scaler) + ",\"ds_version\":" + json_escape(ix.ds_version) +
      ",\"param_groups\":" + std::to_string(ix.num_groups) +
      ",\"sub_groups\":" + std::to_string(ix.stage == 3 ? ix.scalars.size() : 0);
  // A JSON list of the names in `names` whose index `keep` accepts.
  const auto list = [](const std::vector<std::string>& names, const auto& keep) {
    std::string l = "[";
    for (size_t k = 0, n = 0; k < names.size(); ++k)
      if (keep(k)) l += (n++ ? "," : "") + json_escape(names[k]);
    return l + "]";
  };
  const auto all = [](size_t) { return true; };
  o += ",\"states\":" + list(ix.state_names, all) + ",\"per_group\":" + list(ix.scalar_names, all) +
       ",\"whole_states\":" + list(ix.state_names, [&](size_t k) { return ix.whole(k); }) + ",\"group_states\":";
  if (ix.group_states.empty()) o += "null";
  for (size_t g = 0; g < ix.group_states.size(); ++g)
    o += (g ? "," : "[") + list(ix.state_names, [&](size_t k) { return bool(ix.group_states[g][k]); }) +
         (g + 1 == ix.group_states.size() ? "]" : "");
  o += ",\"elastic\":" + std::string(ix.elastic ? "true" : "false");
  o += ",\"step\":" + (ix.run_step() ? pt::format_double(step_number(ix, *ix.run_step())) : std::string("null"));
  uint64_t numel = 0;
  o += ",\"params\":[";
  for (size_t k = 0; k < ix.params.size(); ++k) {
    const Param& p = ix.params[k];
    numel += p.numel;
    o += std::string(k ? "," : "") + "{\"name\":" + json_escape(p.name) + ",\"shape\":" + shape_text(p.shape) +
         ",\"numel\":" + std::to_string(p.numel) + ",\"group\":" + std::to_string(p.group) +
         ",\"sub_group\":" + (p.sub_group >= 0 ? std::to_string(p.sub_group) : "null") + ",\"ranks\":[";
    if (!ix.parallel()) {
      const auto frags = ix.fragments(p, 0);
      for (size_t f = 0; f < frags.size(); ++f) o += (f ? "," : "") + std::to_string(frags[f].rank);
    }
    o += "]";
    if (ix.parallel())
      o += ",\"merge\":{\"rule\":\"" + std::string(tp_rule_name(p.rule)) + "\",\"cat_dim\":" +
           (p.rule == TpRule::Cat || p.rule == TpRule::Expert ? std::to_string(p.cat_dim) : "null") +
           ",\"vocab\":" + (p.vocab ? "true" : "false") + "}";
    o += "}";
  }
  o += "],\"frozen\":[";
  for (size_t k = 0; k < ix.frozen.size(); ++k)
    o += std::string(k ? "," : "") + "{\"name\":" + json_escape(ix.frozen[k].name) +
         ",\"shape\":" + shape_text(ix.frozen[k].shape) + "}";
  o += "],\"module_frozen\":[";
  for (size_t k = 0; k < ix.module_frozen.size(); ++k)
    o += std::string(k ? "," : "") + "{\"name\":" + json_escape(ix.module_frozen[k].name) +
         ",\"shape\":" + shape_text(ix.module_frozen[k].shape) + ",\"dtype\":\"" +
         std::string(pt::dtype_name(ix.module_frozen[k].dtype)) + "\"}";
  o += "],\"buffers\":[";
  for (size_t k = 0; k < ix.buffers.size(); ++k)
    o += std::string(k ? "," : "") + "{\"name\":" + json_escape(ix.buffers[k].name) +
         ",\"shape\":" + shape_text(ix.buffers[k].shape) + ",\"dtype\":\"" +
         std::string(pt::dtype_name(ix.buffers[k].dtype)) + "\"}";
  o += "],\"shared\":[";
  for (size_t k = 0; k < ix.shared.size(); ++k)
    o += std::string(k ? "," : "") + "[" + json_escape(ix.shared[k].first) + "," + json_escape(ix.shared[k].second) +
         "]";
  o += "],\"patterns\":{";
  for (size_t k = 0; k < ix.patterns.size(); ++k) {
    o += std::string(k ? "," : "") + json_escape(ix.patterns[k].first) + ":[";
    for (size_t j = 0; j < ix.patterns[k].second.size(); ++j)
      o += (j ? "," : "") + json_escape(ix.patterns[k].second[j]);
    o += "]";
  }
  o += "},\"totals\":{\"params\":" + std::to_string(ix.params.size()) + ",\"numel\":" + std::to_string(numel) +
       ",\"state_bytes\":" + std::to_string(ix.state_bytes()) + "}}\n";
  return o;
}

}  // namespace zm::ds
