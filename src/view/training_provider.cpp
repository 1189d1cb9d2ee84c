// <T>_bf16/ or <T>_fp16/model.safetensors: the weights in the precision the run trained in, the
// file people publish for inference. Shown only for 16-bit runs; fp32 runs have <T>_fp32 alone.
#include "zeromount/view/browse.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace {

class TrainingProvider final : public Provider {
 public:
  const char* kind() const override { return "training"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const ds::TagIndex& ix = *tag.index;
    if (ix.module_dtype != pt::DType::BF16 && ix.module_dtype != pt::DType::F16) return;
    if (ix.parallel()) return;  // module weights are per tensor-parallel rank: not merged yet
    const struct timespec mtime = cx.tree().get(Tree::kRoot)->mtime;
    const std::string suffix = ix.module_dtype == pt::DType::BF16 ? "_bf16" : "_fp16";
    const uint64_t d = cx.add_top_dir(ix.tag + suffix, kind(), mtime, {&tag});
    if (!d) return;
    const MountedTag* t = &tag;
    cx.tree().add_file(d, "model.safetensors", mtime, [t] { return model_safetensors(*t, Weights::Training); });
  }
};

}  // namespace

std::unique_ptr<Provider> make_training_provider() {
  return std::make_unique<TrainingProvider>();
}

}  // namespace zm::view
