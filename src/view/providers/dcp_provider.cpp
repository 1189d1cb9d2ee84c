// <T>_dcp/: each tag's whole training state as a torch.distributed.checkpoint folder:
// `dcp.load` of an FSDP2 model and its torch optimizer, at any world size, resumes the DeepSpeed
// run (README "Leave DeepSpeed"). Model keys in torch's family and torchtitan's, over the same bytes.
#include <spdlog/spdlog.h>

#include "zeromount/ds/torch_state.h"
#include "zeromount/view/files/dcp_files.h"
#include "zeromount/view/provider.h"

namespace zm::view {

namespace {

class DcpProvider final : public Provider {
 public:
  std::string_view kind() const override { return "dcp"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const std::string name = tag.index->tag + "_dcp";
    if (const std::string why = ds::torch_state_refusal(*tag.index); !why.empty()) {
      spdlog::info("{}: not made: {}", name, why);
      cx.folder().refuse_entry(name, "not made: " + why);
      return;
    }
    const uint64_t d = cx.add_made_dir(name, *this, {&tag});
    if (!d) return;
    DcpShape shape;
    shape.torchtitan = true;
    shape.optimizer = tag.index->optimizer_saved;  // a model-only save: the model keys alone
    cx.tree().set_lazy(d, make_dcp_dir(cx.dcp_plans(), tag, shape, cx.mtime()));
  }
};

}  // namespace

std::unique_ptr<Provider> make_dcp_provider() {
  return std::make_unique<DcpProvider>();
}

}  // namespace zm::view
