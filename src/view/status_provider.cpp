// .zeromount/: what the mount itself says about the source. `errors` lists, one line each, the
// tags that are not served and why (they are shown as their real files only); `stats` counts the
// tags and the bytes each reading process took from the shards. Both are live: they change as the
// mount serves reads and as tags saved after the mount are indexed.
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
    cx.tree().set_access(d, root.access, {root.access.perm & 0444u, root.access.uid, root.access.gid, true});
    const LiveSource* live = &cx.live();
    cx.add_live_text(
        d, "errors", [live] { return live->errors_text(); }, root.mtime);
    cx.add_live_text(
        d, "stats", [live] { return live->stats_text(); }, root.mtime);
  }
};

}  // namespace

std::unique_ptr<Provider> make_status_provider() {
  return std::make_unique<StatusProvider>();
}

}  // namespace zm::view
