#include "zeromount/ds/layout.h"

#include <regex>

namespace zm::ds {

std::optional<ShardName> parse_shard_name(std::string_view filename) {
  static const std::regex kModel(R"(mp_rank_(\d{1,6})_model_states\.pt)");
  static const std::regex kZeroModel(R"(zero_pp_rank_(\d{1,6})_mp_rank_(\d{1,6})_model_states\.pt)");
  static const std::regex kOptim(R"((bf16_|fp16_)?zero_pp_rank_(\d{1,6})_mp_rank_(\d{1,6})_?optim_states\.pt)");
  static const std::regex kLayer(R"(layer_\d+-model_.*model_states\.pt)");
  static const std::regex kExpert(R"((layer_\d+_)?expert_\d+_mp_rank_\d+_model_states\.pt)");
  static const std::regex kExpp(R"(expp_rank_\d+_mp_rank_\d+_optim_states\.pt)");
  const std::string f(filename);
  std::smatch m;
  if (std::regex_match(f, m, kModel)) return ShardName{FileKind::ModelStates, 0, std::stoi(m[1]), ""};
  if (std::regex_match(f, m, kZeroModel))
    return ShardName{FileKind::ZeroModelStates, std::stoi(m[1]), std::stoi(m[2]), ""};
  if (std::regex_match(f, m, kOptim))
    return ShardName{FileKind::OptimStates, std::stoi(m[2]), std::stoi(m[3]), m[1].str()};
  if (std::regex_match(f, m, kLayer)) return ShardName{FileKind::LayerStates};
  if (std::regex_match(f, m, kExpert)) return ShardName{FileKind::ExpertStates};
  if (std::regex_match(f, m, kExpp)) return ShardName{FileKind::ExpertOptim};
  return std::nullopt;
}

static std::string two_digits(int mp) {
  std::string s = std::to_string(mp);
  return s.size() < 2 ? "0" + s : s;
}

std::string model_states_name(int mp) { return "mp_rank_" + two_digits(mp) + "_model_states.pt"; }

std::string zero_model_states_name(int dp, int mp) {
  return "zero_pp_rank_" + std::to_string(dp) + "_mp_rank_" + two_digits(mp) + "_model_states.pt";
}

}  // namespace zm::ds
