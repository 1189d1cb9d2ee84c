// `zeromount inspect` shows the precision facts of a 16-bit run as DeepSpeed's own files state them
// (train.json's optimizer_wrapper and module_dtype, the pickled loss scaler).
#include <gtest/gtest.h>

#include "helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/inspect.h"

namespace zm::test {
namespace {

std::string json_of(const std::string& fixture) {
  return ds::inspect_json(*ds::index_tag(kFixtures + "/" + fixture + "/checkpoint/global_step3"));
}

TEST(Inspect, JsonNamesOptimizerPrecisionAndLossScaler) {
  const std::string fp16 = json_of("z2_ws2_fp16_pg2");
  for (const char* want :
       {"\"optimizer\":\"DeepSpeedZeroOptimizer\"", "\"training_dtype\":\"float16\"", "\"master_dtype\":\"float32\"",
        "\"step_type\":\"tensor\"",
        "\"loss_scaler\":{\"class\":\"DynamicLossScaler\",\"cur_scale\":256.0,\"dynamic\":true,\"cur_iter\":3,"
        "\"last_overflow_iter\":-1,\"scale_factor\":2.0,\"scale_window\":1000,\"min_scale\":1.0,\"delayed_shift\":2,"
        "\"cur_hysteresis\":2,\"consecutive_hysteresis\":false,\"raise_error_at_min_scale\":true,\"dtype\":"
        "\"float16\"}",
        "\"module_frozen\":[{\"name\":\"frozen_scale\",\"shape\":[30],\"dtype\":\"float16\"}]"})
    EXPECT_NE(fp16.find(want), std::string::npos) << want << "\n" << fp16;
  const std::string bf16opt = json_of("z1_ws2_bf16_pg2_fp32acc");
  for (const char* want :
       {"\"optimizer\":\"BF16_Optimizer\"", "\"training_dtype\":\"bfloat16\"", "\"loss_scaler\":null", "\"frozen\":[]",
        "\"module_frozen\":[{\"name\":\"frozen_scale\",\"shape\":[30],\"dtype\":\"bfloat16\"}]"})
    EXPECT_NE(bf16opt.find(want), std::string::npos) << want << "\n" << bf16opt;
  const std::string z3 = json_of("z3_ws2_bf16_pg2");
  for (const char* want : {"\"optimizer\":\"DeepSpeedZeroOptimizer_Stage3\"", "\"training_dtype\":\"bfloat16\"",
                           "\"loss_scaler\":{\"class\":\"LossScaler\",\"cur_scale\":1.0,\"dynamic\":false}"})
    EXPECT_NE(z3.find(want), std::string::npos) << want << "\n" << z3;
}

TEST(Inspect, TextShowsTrainingPrecision) {
  const std::string t = ds::inspect_text(*ds::index_tag(kFixtures + "/z2_ws2_bf16_pg2/checkpoint/global_step3"));
  EXPECT_NE(t.find("optimizer   DeepSpeedZeroOptimizer"), std::string::npos) << t;
  EXPECT_NE(t.find("training    bfloat16 module weights"), std::string::npos) << t;
  EXPECT_NE(t.find("loss scale  LossScaler (cur_scale 1.0)"), std::string::npos) << t;
  EXPECT_NE(t.find("2,041 elements"), std::string::npos) << t;  // with_commas, rewritten
}

}  // namespace
}  // namespace zm::test
