// layouts/<target>/: load_dirs that look as if DeepSpeed had saved the source natively at another
// ZeRO stage, DP size and precision (issue 11, spec fake-layouts.md §6). A listing shows README,
// the source's own layout and the presets; every other valid name is made on its first lookup,
// so `find` or `cp -r` never walk hundreds of synthetic checkpoints. Rank files are made when
// looked up or listed, so a DP-65536 target costs O(params) until someone asks for its files.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "layout_files.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view.h"

namespace zm::view {

namespace {

namespace fs = std::filesystem;

// The rank files of one tag folder of a target: named on demand, built on open.
class RankFiles final : public LazyDir {
 public:
  RankFiles(std::shared_ptr<const LayoutTag> layout, struct timespec mtime)
      : layout_(std::move(layout)), mtime_(mtime) {}
  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    const auto k = layout_->file_index(name);
    if (!k) return 0;
    auto layout = layout_;
    const uint64_t file = *k;
    Builder build = [layout, file] { return layout->build(file); };
    if (!layout->sized())
      return tree.add_file(dir, std::string(name), mtime_, std::move(build), Inode::kUnknown, false);
    // `ls -l` of thousands of ZeRO-3 rank files: sized without building each one.
    return tree.add_file(
        dir, std::string(name), mtime_, std::move(build), [layout, file] { return layout->size(file); }, false);
  }
  uint64_t listed() const override { return layout_->files(); }
  std::string listed_name(uint64_t k) const override { return layout_->file_name(k); }

 private:
  std::shared_ptr<const LayoutTag> layout_;
  struct timespec mtime_;
};

// A target is served whole or not at all: its LayoutTag for each tag, or zm::Error naming why
// not. The listing, a lookup and a tag indexed after the mount all decide here.
// `options`: each tag's run options, when already read.
std::vector<std::shared_ptr<const LayoutTag>> layouts_of(const std::vector<const MountedTag*>& tags,
                                                         const ds::TargetLayout& target,
                                                         const std::vector<ds::SourceOptions>* options = nullptr) {
  std::vector<std::shared_ptr<const LayoutTag>> out;
  for (size_t k = 0; k < tags.size(); ++k)
    out.push_back(std::make_shared<const LayoutTag>(*tags[k], target, options ? &options->at(k) : nullptr));
  return out;
}

struct RealFile {
  std::string name;
  uint32_t id = 0;
  uint64_t size = 0;
};

// layouts/: every valid target name resolves; the listing shows the own layout and the presets.
// A tag indexed after the mount joins every target (add): the tag list only grows, and it is read
// and changed under the tree's exclusive lock only (make and Tree::append).
class Targets final : public LazyDir {
 public:
  Targets(std::vector<const MountedTag*> tags, std::vector<std::string> listed, const LiveSource* live,
          std::vector<RealFile> copied, struct timespec mtime)
      : tags_(std::move(tags)), listed_(std::move(listed)), live_(live), copied_(std::move(copied)), mtime_(mtime) {}

  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    const auto target = ds::parse_target(name);
    if (!target) return 0;  // one layout, one name: every other spelling is ENOENT
    std::vector<std::shared_ptr<const LayoutTag>> layouts;
    try {
      layouts = layouts_of(tags_, *target);
    } catch (const Error& e) {
      if (refused_.insert(std::string(name)).second) spdlog::error("layouts/{}: {}", name, e.what());
      return 0;
    }
    const uint64_t d = tree.add_dir(dir, std::string(name), mtime_, false);
    if (live_) {
      const LiveSource* live = live_;
      tree.add_live_file(d, "latest", mtime_, [live] {
        pt::VirtualFile f;
        f.append_inline(live->latest_text());
        return f;
      });
    }
    for (const RealFile& r : copied_) {
      const uint32_t id = r.id;
      const uint64_t size = r.size;
      tree.add_file(
          d, r.name, mtime_,
          [id, size] {
            pt::VirtualFile f;
            f.append_extent({id, 0, size});
            return f;
          },
          size);
    }
    for (const auto& layout : layouts) add_tag_dir(tree, d, layout);
    return d;
  }
  uint64_t listed() const override { return listed_.size(); }
  std::string listed_name(uint64_t k) const override { return listed_.at(k); }

  // A tag indexed after the mount: in every target made so far, and in those made later.
  void add(Tree& tree, uint64_t dir, const MountedTag& tag) const {
    for (const std::string& name : listed_) {  // a listed name must keep resolving
      try {
        layouts_of({&tag}, *ds::parse_target(name));
      } catch (const Error& e) {
        spdlog::error("layouts: {} not added (it cannot be shown at the listed {}): {}", tag.index->tag, name,
                      e.what());
        return;
      }
    }
    tags_.push_back(&tag);
    std::vector<std::pair<std::string, uint64_t>> made;
    for (const auto& [name, ino] : tree.get(dir)->by_name)
      if (tree.get(ino)->dir) made.emplace_back(name, ino);
    for (const auto& [name, ino] : made) {
      try {
        add_tag_dir(tree, ino, std::make_shared<const LayoutTag>(tag, *ds::parse_target(name)));
      } catch (const Error& e) {
        spdlog::error("layouts/{}: {} not added: {}", name, tag.index->tag, e.what());
      }
    }
  }

 private:
  void add_tag_dir(Tree& tree, uint64_t target_dir, std::shared_ptr<const LayoutTag> layout) const {
    const uint64_t tag_dir = tree.add_dir(target_dir, layout->tag().index->tag, mtime_);
    tree.set_lazy(tag_dir, std::make_shared<RankFiles>(std::move(layout), mtime_));
  }

  mutable std::vector<const MountedTag*> tags_;
  std::vector<std::string> listed_;
  const LiveSource* live_;  // nullptr: SRC has no `latest`
  std::vector<RealFile> copied_;
  struct timespec mtime_;
  mutable std::set<std::string> refused_;  // make() runs under the tree's exclusive lock
};

// What the own layout is: the real files, written anew; or, for a tensor-/pipeline-parallel source,
// its grid merged to TP = PP = 1, which no real file of it is.
std::string own_note(const ds::TagIndex& ix) {
  if (!ix.parallel())
    return "a self-check: tensor-equal to the real files (same keys, values, dtypes, shapes and storage\n"
           "sharing), not byte-equal: the pickles and zip records are written anew";
  return "its TP=" + std::to_string(ix.tp) + " x PP=" + std::to_string(ix.pp) + " x DP=" + std::to_string(ix.dp) +
         " grid merged to TP=1 and PP=1: the state of its universal tensors laid\n"
         "out natively for a TP=1 engine, not its own files";
}

std::string readme(const std::string& dir, const std::string& own, const std::string& note,
                   const std::vector<std::string>& listed, const std::vector<std::string>& refused) {
  std::ostringstream s;
  s << "Faked native layouts (zeromount; docs/fake-layouts-plan.md)\n\n"
    << "Each " << dir << "/<target>/ is a load_dir that looks as if DeepSpeed had saved this checkpoint\n"
    << "natively at another ZeRO stage, DP size and precision: engine.load_checkpoint() loads it without\n"
    << "load_universal, and zero_to_fp32.py / ds_to_universal.py read it like a real one.\n\n"
    << "Names (one spelling each; any other is 'No such file or directory'):\n"
    << "  zero1-dp<W>-<p>[-rr]    ZeRO-1, DP size W (1..65536), precision p = fp32 | fp16 | bf16,\n"
    << "                          -rr: round_robin_gradients\n"
    << "  zero2-dp<W>-<p>[-rr]    ZeRO-2\n"
    << "  zero3-dp<W>-<p>[-sg<N>] ZeRO-3, -sg: sub_group_size N (left out at the default 1000000000)\n"
    << "  bf16opt-dp<W>           BF16_Optimizer (bf16)\n\n"
    << "This checkpoint's own layout: " << own << "\n(" << note << ")\n"
    << "Listed here (the own layout and the presets of -o layouts=a,b):";
  for (const auto& n : listed) s << " " << n;
  s << "\n";
  for (const auto& r : refused) s << "Not listed: " << r << "\n";
  s << "Any other valid name is made when it is first looked up, e.g. " << dir << "/zero3-dp64-bf16.\n"
    << "A target is served whole or not at all: one the source cannot be presented at is 'No such file\n"
    << "or directory', with one log line that names the reason.\n";
  return s.str();
}

class LayoutsProvider final : public Provider {
 public:
  const char* kind() const override { return "layouts"; }

  // At mount add_root makes the folder for every tag; a tag indexed later joins it.
  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    if (cx.mounting()) return;
    const Inode* dir = cx.tree().lookup(Tree::kRoot, cx.options().layouts_dir);
    if (!dir) return add_root(cx, {&tag});  // the first tag of a folder mounted empty
    if (dir->made_by != kind()) return;     // SRC's own folder of that name
    if (const auto* targets = dynamic_cast<const Targets*>(dir->lazy.get())) targets->add(cx.tree(), dir->ino, tag);
  }

  void add_root(ProviderContext& cx, const std::vector<const MountedTag*>& tags) const override {
    if (tags.empty()) return;
    const ViewOptions& o = cx.options();
    const struct timespec mtime = cx.tree().get(Tree::kRoot)->mtime;
    // The own layout is that of the tag `latest` names (else the last one).
    // Each tag's run options come from its model-state pickle: read once here, not once per name.
    std::vector<ds::SourceOptions> options;
    size_t own_k = tags.size() - 1;
    for (size_t k = 0; k < tags.size(); ++k) {
      options.push_back(ds::source_options(*tags[k]->index));
      if (cx.latest() && tags[k]->index->tag == *cx.latest()) own_k = k;
    }
    const MountedTag* own_tag = tags[own_k];
    const std::string own = ds::target_name(ds::source_layout(*own_tag->index, options[own_k]));
    std::vector<std::string> listed, refused;
    for (const std::string& name : [&] {
           std::vector<std::string> v{own};
           v.insert(v.end(), o.layout_presets.begin(), o.layout_presets.end());
           return v;
         }()) {
      if (std::find(listed.begin(), listed.end(), name) != listed.end()) continue;
      const auto target = ds::parse_target(name);
      if (!target) throw Error("-o layouts: '" + name + "' is not a layout name (fake-layouts.md §6)", EINVAL);
      try {  // a listed name must resolve: check it now, cheaply (the plans are O(params))
        layouts_of(tags, *target, &options);
      } catch (const Error& e) {
        spdlog::error("{}/{}: not listed: {}", o.layouts_dir, name, e.what());
        refused.push_back(name + ": " + e.what());
        continue;
      }
      listed.push_back(name);
    }
    const uint64_t dir = cx.add_top_dir(o.layouts_dir, kind(), mtime, tags);
    if (!dir) return;  // a real SRC/layouts wins (ProviderContext logged it); -o layouts_dir=NAME
    cx.add_text(dir, "README", readme(o.layouts_dir, own, own_note(*own_tag->index), listed, refused), mtime);

    // latest (as the mount's own `latest` shows it) and zero_to_fp32.py as in SRC (spec §1.1).
    const fs::path root = fs::path(own_tag->index->dir).parent_path();
    const Inode* latest = cx.tree().lookup(Tree::kRoot, "latest");
    std::vector<RealFile> copied;
    if (const fs::path z = root / "zero_to_fp32.py"; fs::is_regular_file(z)) {
      const uint32_t id = cx.files().add(z.string());
      copied.push_back({"zero_to_fp32.py", id, uint64_t(cx.files().stat(id).st_size)});
    }
    cx.tree().set_lazy(dir, std::make_shared<Targets>(tags, std::move(listed), latest ? &cx.live() : nullptr,
                                                      std::move(copied), mtime));
  }
};

}  // namespace

std::unique_ptr<Provider> make_layouts_provider() {
  return std::make_unique<LayoutsProvider>();
}

}  // namespace zm::view
