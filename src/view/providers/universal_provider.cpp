// <T>_universal/: the universal checkpoint ds_to_universal.py would write, under both model-state
// name families [formats §6.6], and latest_universal beside `latest`.
#include <filesystem>

#include "zeromount/ds/shard_names.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/ds/universal_file.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/files/layout_files.h"
#include "zeromount/view/files/param_names.h"
#include "zeromount/view/files/universal.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view_options.h"

namespace zm::view {

namespace {

constexpr const char* kSuffix = "_universal";

// Why no universal folder is made of a tag, or "": a save without optimizer state, or one whose
// made-up model-state files (a DCP source has none of its own) cannot be made.
std::string refusal(const MountedTag& tag) {
  const ds::TagIndex& ix = *tag.index;
  if (std::string why = ds::native_layout_refusal(ix); !why.empty()) return why;
  if (!ix.model_files.empty() || !ix.mp_files.empty()) return "";
  try {
    LayoutTag(tag, made_model_states_layout(ix));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class UniversalProvider final : public Provider {
 public:
  std::string_view kind() const override { return "universal"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const ds::TagIndex& ix = *tag.index;
    const struct timespec mtime = cx.mtime();
    if (const std::string why = refusal(tag); !why.empty()) {
      cx.folder().refuse_entry(ix.tag + kSuffix, "not made: " + why);
      return;
    }
    const uint64_t u = cx.add_made_dir(ix.tag + kSuffix, *this, {&tag});
    if (!u) return;
    Tree& tree = cx.tree();
    const MountedTag* t = &tag;
    if (ix.autoep()) {  // the converter re-saves them with AutoEP's universal_checkpoint_info [tp §8]
      for (const auto& f : ix.mp_files)
        tree.add_file(u, std::filesystem::path(f).filename().string(), mtime,
                      [t, f] { return autoep_model_states_file(*t, f); });
    } else if (ix.parallel()) {  // the converter copies every model-state file, under its own name [tp §5]
      for (const auto& f : ix.mp_files) cx.add_real_file(u, std::filesystem::path(f).filename().string(), f);
    } else if (ix.model_files.empty()) {  // a DCP source: one made-up file under every name
      tree.add_file(u, ds::model_states_name(0), mtime, [t] { return made_model_states_file(*t); });
      for (int r = 0; r < ix.dp; ++r)
        tree.add_file(u, ds::zero_model_states_name(r, 0), mtime, [t] { return made_model_states_file(*t); });
    } else {
      cx.add_real_file(u, ds::model_states_name(0), ix.model_files.at(0));
      for (int r = 0; r < ix.dp; ++r)
        cx.add_real_file(u, ds::zero_model_states_name(r, 0), ix.model_files.at(ix.stage == 3 ? size_t(r) : 0));
    }
    const uint64_t zero = tree.add_dir(u, "zero", mtime);
    tree.add_file(zero, "optimizer_state.pt", mtime, [t] { return optimizer_state_file(*t); });
    const bool bare = cx.options().bare_zero3_tensors && ix.stage == 3;
    for (const ds::Param& p : ix.params) {
      const uint64_t d = tree.add_dir(zero, param_dir_name(p.name, {"optimizer_state.pt"}), mtime);
      const ds::Param* pp = &p;
      for (const ds::UniversalParamFile& f : ds::universal_param_files(ix, p)) {
        const size_t k = f.k;
        if (f.kind == ds::UniversalParamFile::State)
          tree.add_file(d, ds::universal_file_name(ix, f), mtime,
                        [t, pp, k, bare] { return param_state_file(*t, *pp, k, bare); });
        else
          tree.add_file(d, ds::universal_file_name(ix, f), mtime,
                        [t, g = size_t(p.step), k] { return scalar_file(*t, g, k); });
      }
    }
    if (!cx.building()) add_folder(cx, {});  // the first tag latest names may come after the fill
  }

  // latest_universal follows `latest`: `<T>_universal` for the tag latest names, as long as that
  // tag's universal folder is made up here.
  void add_folder(ProviderContext& cx, const std::vector<const MountedTag*>&) const override {
    const auto latest = cx.latest();
    if (!latest) return;
    const uint64_t dir = cx.dir();
    const Inode* u = cx.tree().lookup(dir, *latest + kSuffix);
    if (!u || u->made_by != this) return;
    if (cx.tree().lookup(dir, "latest_universal")) return;       // the folder's own is shown as is
    const Inode* real_latest = cx.tree().lookup(dir, "latest");  // its text comes from there
    const CheckpointFolder* folder = &cx.folder();
    const Tree* tree = &cx.tree();
    std::string last = *latest + kSuffix;
    const Provider* self = this;
    cx.add_made_text(
        "latest_universal", *this,
        [folder, tree, dir, last, self] {
          const auto now = folder->latest_tag();
          const Inode* d = now ? tree->lookup(dir, *now + kSuffix) : nullptr;
          return d && d->made_by == self ? *now + kSuffix : last;
        },
        real_latest ? real_latest->access : u->access);
  }
};

}  // namespace

std::unique_ptr<Provider> make_universal_provider() {
  return std::make_unique<UniversalProvider>();
}

}  // namespace zm::view
