// <T>_fp32/model.safetensors: every weight in fp32, as zero_to_fp32.py writes it.
#include "zeromount/view/browse.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace {

class Fp32Provider final : public Provider {
 public:
  const char* kind() const override { return "fp32"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const struct timespec mtime = cx.tree().get(Tree::kRoot)->mtime;
    const uint64_t d = cx.add_top_dir(tag.index->tag + "_fp32", kind(), mtime, {&tag});
    if (!d) return;
    const MountedTag* t = &tag;
    cx.tree().add_file(d, "model.safetensors", mtime, [t] { return model_safetensors(*t, Weights::Master); });
  }
};

}  // namespace

std::unique_ptr<Provider> make_fp32_provider() {
  return std::make_unique<Fp32Provider>();
}

}  // namespace zm::view
