#include "zeromount/ds/shard_names.h"

namespace zm::ds {

namespace {

// A cursor over a file name; each step consumes on success and leaves `s` alone on failure.
struct Cursor {
  std::string_view s;
  bool lit(std::string_view p) {
    if (s.substr(0, p.size()) != p) return false;
    s.remove_prefix(p.size());
    return true;
  }
  // 1..max_digits decimal digits, as DeepSpeed's %d / %02d produce them.
  bool num(int& out, size_t max_digits = 6) {
    size_t n = 0;
    int v = 0;
    while (n < s.size() && n < max_digits && s[n] >= '0' && s[n] <= '9') v = v * 10 + (s[n++] - '0');
    if (n == 0 || (n < s.size() && s[n] >= '0' && s[n] <= '9')) return false;
    s.remove_prefix(n);
    out = v;
    return true;
  }
  bool end() const { return s.empty(); }
};

}  // namespace

std::optional<ShardName> parse_shard_name(std::string_view filename) {
  Cursor c{filename};
  int dp = 0, mp = 0, skip = 0;
  if (Cursor k = c; k.lit("mp_rank_") && k.num(mp) && k.lit("_model_states.pt") && k.end())
    return ShardName{FileKind::ModelStates, 0, mp, ""};
  if (Cursor k = c;
      k.lit("zero_pp_rank_") && k.num(dp) && k.lit("_mp_rank_") && k.num(mp) && k.lit("_model_states.pt") && k.end())
    return ShardName{FileKind::ZeroModelStates, dp, mp, ""};
  {
    Cursor k = c;
    std::string prefix;
    for (const char* p : {"bf16_", "fp16_"})
      if (k.lit(p)) prefix = p;
    // "_optim_states.pt", or the legacy "optim_states.pt" glued to the mp rank.
    if (k.lit("zero_pp_rank_") && k.num(dp) && k.lit("_mp_rank_") && k.num(mp) &&
        (k.lit("_optim_states.pt") || k.lit("optim_states.pt")) && k.end())
      return ShardName{FileKind::OptimStates, dp, mp, prefix};
  }
  // layer_XX-model_states.pt, or layer_XX-model_YY-model_states.pt with tensor parallelism
  if (Cursor k = c; k.lit("layer_") && k.num(skip, 9) && k.lit("-model_") && k.s.ends_with("states.pt"))
    return ShardName{FileKind::LayerStates, 0, 0, "", skip};
  {
    Cursor k = c;
    if (Cursor l = k; l.lit("layer_") && l.num(skip, 9) && l.lit("_")) k = l;
    if (k.lit("expert_") && k.num(skip, 9) && k.lit("_mp_rank_") && k.num(skip, 9) && k.lit("_model_states.pt") &&
        k.end())
      return ShardName{FileKind::ExpertStates};
  }
  if (Cursor k = c; k.lit("expp_rank_") && k.num(skip, 9) && k.lit("_mp_rank_") && k.num(skip, 9) &&
                    k.lit("_optim_states.pt") && k.end())
    return ShardName{FileKind::ExpertOptim};
  return std::nullopt;
}

namespace {
std::string two_digits(int mp) {
  std::string s = std::to_string(mp);
  return s.size() < 2 ? "0" + s : s;
}
}  // namespace

std::string model_states_name(int mp) {
  return "mp_rank_" + two_digits(mp) + "_model_states.pt";
}

std::string zero_model_states_name(int dp, int mp) {
  return "zero_pp_rank_" + std::to_string(dp) + "_mp_rank_" + two_digits(mp) + "_model_states.pt";
}

std::string optim_states_name(std::string_view prefix, int dp, int mp) {
  return std::string(prefix) + "zero_pp_rank_" + std::to_string(dp) + "_mp_rank_" + two_digits(mp) + "_optim_states.pt";
}

}  // namespace zm::ds
