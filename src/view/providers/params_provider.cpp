// <T>_params/: README, summary, and per parameter its info and one .npy per optimizer state.
#include "zeromount/view/files/browse.h"
#include "zeromount/view/files/param_names.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view_options.h"

namespace zm::view {

namespace {

class ParamsProvider final : public Provider {
 public:
  std::string_view kind() const override { return "params"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const ds::TagIndex& ix = *tag.index;
    const struct timespec mtime = cx.mtime();
    const uint64_t d = cx.add_made_dir(ix.tag + "_params", *this, {&tag});
    if (!d) return;
    Tree& tree = cx.tree();
    const MountedTag* t = &tag;
    const pt::ExtentReader* files = &cx.files();
    cx.add_text(d, "README", params_readme(ix.tag, cx.options().report), mtime);
    tree.add_file(d, "summary", mtime, [t] { return pt::VirtualFile::from_text(params_summary(*t->index)); });
    for (const ds::Param& p : ix.params) {
      const uint64_t pd = tree.add_dir(d, param_dir_name(p.name, {"README", "summary", "report.html"}), mtime);
      const ds::Param* pp = &p;
      // The statistics read the whole parameter, so stat() sizes the text without them.
      tree.add_file(
          pd, "info", mtime, [t, pp, files] { return pt::VirtualFile::from_text(param_info(*t, *pp, files)); },
          [t, pp] { return uint64_t(param_info(*t, *pp, nullptr).size()); });
      for (size_t k = 0; k < ix.state_names.size(); ++k)
        if (ix.has(p, k))
          tree.add_file(pd, ix.state_names[k] + ".npy", mtime, [t, pp, k] { return param_npy(*t, *pp, k); });
    }
  }
};

}  // namespace

std::unique_ptr<Provider> make_params_provider() {
  return std::make_unique<ParamsProvider>();
}

}  // namespace zm::view
