// .zeromount/: what the mount itself says about the source. `errors` lists, one line each, the
// tags that could not be indexed and why (they are shown as their real files only).
#include "zeromount/view/provider.h"

namespace zm::view {

namespace {

class StatusProvider final : public Provider {
 public:
  const char* kind() const override { return "status"; }
  void add_tag(ProviderContext&, const MountedTag&) const override {}

  void add_root(ProviderContext& cx, const std::vector<const MountedTag*>&) const override {
    const Inode& root = *cx.tree().get(Tree::kRoot);
    const uint64_t d = cx.add_top_dir(".zeromount", kind(), root.mtime, {});
    if (!d) return;
    std::string text;
    for (const auto& e : cx.errors()) text += e.tag + ": " + e.reason + "\n";
    cx.tree().set_access(d, root.access, {root.access.perm & 0444u, root.access.uid, root.access.gid, true});
    cx.add_text(d, "errors", text, root.mtime);
  }
};

}  // namespace

std::unique_ptr<Provider> make_status_provider() {
  return std::make_unique<StatusProvider>();
}

}  // namespace zm::view
