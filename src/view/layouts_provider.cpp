// layouts/<target>/: load_dirs that look as if DeepSpeed had saved the source natively at another
// ZeRO stage, DP size and precision (issue 11, spec fake-layouts.md §6). A listing shows README,
// the source's own layout and the presets; every other valid name is made on its first lookup,
// so `find` or `cp -r` never walk hundreds of synthetic checkpoints. Rank files are made when
// looked up or listed, so a DP-65536 target costs O(params) until someone asks for its files.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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
    return tree.add_file(
        dir, std::string(name), mtime_, [layout, file] { return layout->build(file); }, Inode::kUnknown, false);
  }
  uint64_t listed() const override { return layout_->files(); }
  std::string listed_name(uint64_t k) const override { return layout_->file_name(k); }

 private:
  std::shared_ptr<const LayoutTag> layout_;
  struct timespec mtime_;
};

struct RealFile {
  std::string name;
  uint32_t id = 0;
  uint64_t size = 0;
};

// layouts/: every valid target name resolves; the listing shows the own layout and the presets.
class Targets final : public LazyDir {
 public:
  Targets(std::vector<const MountedTag*> tags, std::vector<std::string> listed, std::optional<std::string> latest,
          std::vector<RealFile> copied, struct timespec mtime)
      : tags_(std::move(tags)),
        listed_(std::move(listed)),
        latest_(std::move(latest)),
        copied_(std::move(copied)),
        mtime_(mtime) {}

  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    const auto target = ds::parse_target(name);
    if (!target) return 0;  // one layout, one name: every other spelling is ENOENT
    std::vector<std::shared_ptr<const LayoutTag>> layouts;
    try {
      for (const MountedTag* t : tags_) layouts.push_back(std::make_shared<const LayoutTag>(*t, *target));
    } catch (const Error& e) {
      if (refused_.insert(std::string(name)).second) spdlog::error("layouts/{}: {}", name, e.what());
      return 0;
    }
    const uint64_t d = tree.add_dir(dir, std::string(name), mtime_, false);
    if (latest_) {
      const std::string text = *latest_;
      tree.add_file(
          d, "latest", mtime_,
          [text] {
            pt::VirtualFile f;
            f.append_inline(text);
            return f;
          },
          text.size());
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
    for (const auto& layout : layouts) {
      const uint64_t tag_dir = tree.add_dir(d, layout->tag().index->tag, mtime_);
      tree.set_lazy(tag_dir, std::make_shared<RankFiles>(layout, mtime_));
    }
    return d;
  }
  uint64_t listed() const override { return listed_.size(); }
  std::string listed_name(uint64_t k) const override { return listed_.at(k); }

 private:
  std::vector<const MountedTag*> tags_;
  std::vector<std::string> listed_;
  std::optional<std::string> latest_;
  std::vector<RealFile> copied_;
  struct timespec mtime_;
  mutable std::set<std::string> refused_;  // make() runs under the tree's exclusive lock
};

std::string readme(const std::string& dir, const std::string& own, const std::vector<std::string>& listed) {
  std::ostringstream s;
  s << "Faked native layouts (zeromount, issue 11; docs/fake-layouts-plan.md)\n\n"
    << "Each " << dir << "/<target>/ is a load_dir that looks as if DeepSpeed had saved this checkpoint\n"
    << "natively at another ZeRO stage, DP size and precision: engine.load_checkpoint() loads it without\n"
    << "load_universal, and zero_to_fp32.py / ds_to_universal.py read it like a real one.\n\n"
    << "Names (one spelling each; any other is 'No such file or directory'):\n"
    << "  zero1-dp<W>-<p>[-rr]    ZeRO-1, DP size W (1..65536), precision p = fp32 | fp16 | bf16,\n"
    << "                          -rr: round_robin_gradients\n"
    << "  zero2-dp<W>-<p>[-rr]    ZeRO-2\n"
    << "  zero3-dp<W>-<p>[-sg<N>] ZeRO-3, -sg: sub_group_size N (left out at the default 1000000000)\n"
    << "  bf16opt-dp<W>           BF16_Optimizer (bf16)\n\n"
    << "This checkpoint's own layout: " << own << "\n"
    << "Listed here (the own layout and the presets of -o layouts=a,b):";
  for (const auto& n : listed) s << " " << n;
  s << "\nAny other valid name is made when it is first looked up, e.g. " << dir << "/zero3-dp64-bf16.\n"
    << "Targets the source cannot be presented at are refused (one log line names the reason).\n";
  return s.str();
}

class LayoutsProvider final : public Provider {
 public:
  const char* kind() const override { return "layouts"; }
  void add_tag(ProviderContext&, const MountedTag&) const override {}

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
    std::vector<std::string> listed;
    for (const std::string& name : [&] {
           std::vector<std::string> v{own};
           v.insert(v.end(), o.layout_presets.begin(), o.layout_presets.end());
           return v;
         }()) {
      if (std::find(listed.begin(), listed.end(), name) != listed.end()) continue;
      const auto target = ds::parse_target(name);
      if (!target) throw Error("-o layouts: '" + name + "' is not a layout name (fake-layouts.md §6)", EINVAL);
      try {  // a listed name must resolve: check it now, cheaply (the plans are O(params))
        for (size_t k = 0; k < tags.size(); ++k) ds::plan_partitions(*tags[k]->index, *target, options[k]);
      } catch (const Error& e) {
        spdlog::error("{}/{}: not listed: {}", o.layouts_dir, name, e.what());
        continue;
      }
      listed.push_back(name);
    }
    const uint64_t dir = cx.add_top_dir(o.layouts_dir, kind(), mtime, tags);
    if (!dir) return;  // a real SRC/layouts wins (ProviderContext logged it); -o layouts_dir=NAME
    cx.add_text(dir, "README", readme(o.layouts_dir, own, listed), mtime);

    // latest and zero_to_fp32.py as in SRC (spec §1.1).
    const fs::path root = fs::path(own_tag->index->dir).parent_path();
    std::optional<std::string> latest;
    if (cx.latest()) latest = *cx.latest();
    if (std::ifstream in(root / "latest", std::ios::binary); in && fs::is_regular_file(root / "latest")) {
      std::ostringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      // SRC's own bytes (DeepSpeed writes no newline), unless the mount is a lone tag folder.
      if (!latest || bytes.substr(0, bytes.find_last_not_of(" \n\r\t") + 1) == *latest) latest = bytes;
    }
    std::vector<RealFile> copied;
    if (const fs::path z = root / "zero_to_fp32.py"; fs::is_regular_file(z)) {
      const uint32_t id = cx.files().add(z.string());
      copied.push_back({"zero_to_fp32.py", id, uint64_t(cx.files().stat(id).st_size)});
    }
    cx.tree().set_lazy(dir,
                       std::make_shared<Targets>(tags, std::move(listed), std::move(latest), std::move(copied), mtime));
  }
};

}  // namespace

std::unique_ptr<Provider> make_layouts_provider() {
  return std::make_unique<LayoutsProvider>();
}

}  // namespace zm::view
