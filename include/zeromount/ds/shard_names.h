#pragma once
// DeepSpeed's file names [formats §2.2]: what each file in a tag folder is, parsed from its name.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zm::ds {

enum class FileKind {
  ModelStates,      // mp_rank_XX_model_states.pt (stage 0/1/2)
  ZeroModelStates,  // zero_pp_rank_N_mp_rank_XX_model_states.pt (stage 3)
  OptimStates,      // [bf16_|fp16_]zero_pp_rank_N_mp_rank_XX[_]optim_states.pt
  LayerStates,      // layer_XX-model_states.pt, layer_XX-model_YY-model_states.pt (pipeline)
  ExpertStates,     // [layer_L_]expert_E_mp_rank_XX_model_states.pt (MoE)
  ExpertOptim,      // expp_rank_R_mp_rank_XX_optim_states.pt (MoE without ZeRO)
};

struct ShardName {
  FileKind kind;
  int dp = 0;
  int mp = 0;
  std::string prefix;  // "", "bf16_" or "fp16_" for optimizer files
  int layer = -1;      // a pipeline layer file's layer index
};

std::optional<ShardName> parse_shard_name(std::string_view filename);
std::string model_states_name(int mp);               // mp_rank_00_model_states.pt
std::string zero_model_states_name(int dp, int mp);  // zero_pp_rank_0_mp_rank_00_model_states.pt
// bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt (prefix "", "bf16_" or "fp16_")
std::string optim_states_name(std::string_view prefix, int dp, int mp);

}  // namespace zm::ds
