// .zeromount/: what the mount itself says about the source. `errors` lists, one line each, the
// tags that are not served and why (they are shown as their real files only); `stats` counts the
// tags and the bytes each reading process took from the shards. Both are live: they change as the
// mount serves reads and as tags saved after the mount are indexed, and each reader is shown only
// what it may see.
#include <spdlog/spdlog.h>

#include "zeromount/view/provider.h"

namespace zm::view {

namespace {

class StatusProvider final : public Provider {
 public:
  std::string_view kind() const override { return "status"; }
  void add_mount(Tree& tree, const LiveSource& live) const override {
    const Inode& root = *tree.get(Tree::kRoot);
    if (tree.lookup(Tree::kRoot, ".zeromount")) {
      spdlog::warn(".zeromount: a real entry of that name exists; showing it instead of the mount's status");
      return;
    }
    const uint64_t d = tree.add_dir(Tree::kRoot, ".zeromount", root.mtime);
    tree.mark_made_by(d, *this);
    tree.set_access(d, root.access, {root.access.perm & 0444u, root.access.uid, root.access.gid, true});
    const LiveSource* src = &live;
    // On an allow_other mount each reader sees the lines about what it may read, and its own processes.
    for (auto text : {&LiveSource::errors_text, &LiveSource::stats_text})
      tree.add_live_file(
          d, text == &LiveSource::errors_text ? "errors" : "stats", root.mtime,
          CallerBuilder([src, text](const Caller& who) { return pt::VirtualFile::from_text((src->*text)(who)); }));
  }
};

}  // namespace

std::unique_ptr<Provider> make_status_provider() {
  return std::make_unique<StatusProvider>();
}

}  // namespace zm::view
