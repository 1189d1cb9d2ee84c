// Consolidated weights as one model.safetensors per tag, in two kinds:
//   fp32      <T>_fp32/: every weight in fp32, as zero_to_fp32.py writes it;
//   training  <T>_bf16/ or <T>_fp16/: the precision the run trained in, the file people publish
//             for inference. Shown only for 16-bit runs; fp32 runs have <T>_fp32 alone.
#include "zeromount/view/browse.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace {

class WeightsProvider final : public Provider {
 public:
  explicit WeightsProvider(Weights which) : which_(which) {}
  const char* kind() const override { return which_ == Weights::Master ? "fp32" : "training"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const std::string suffix = folder_suffix(*tag.index);
    if (suffix.empty()) return;
    const struct timespec mtime = cx.tree().get(Tree::kRoot)->mtime;
    const uint64_t d = cx.add_top_dir(tag.index->tag + suffix, kind(), mtime, {&tag});
    if (!d) return;
    const MountedTag* t = &tag;
    const Weights which = which_;
    cx.tree().add_file(d, "model.safetensors", mtime, [t, which] { return model_safetensors(*t, which); });
  }

 private:
  // "" when this tag has no such folder.
  std::string folder_suffix(const ds::TagIndex& ix) const {
    if (which_ == Weights::Master) return "_fp32";
    if (ix.parallel()) return "";  // module weights are per tensor-parallel rank: not merged yet
    if (ix.module_dtype == pt::DType::BF16) return "_bf16";
    if (ix.module_dtype == pt::DType::F16) return "_fp16";
    return "";
  }
  Weights which_;
};

}  // namespace

std::unique_ptr<Provider> make_fp32_provider() {
  return std::make_unique<WeightsProvider>(Weights::Master);
}

std::unique_ptr<Provider> make_training_provider() {
  return std::make_unique<WeightsProvider>(Weights::Training);
}

}  // namespace zm::view
