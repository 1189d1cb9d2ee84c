// layouts/<target>/: load_dirs that look as if DeepSpeed had saved the source natively at another
// ZeRO stage, DP size and precision ([layouts §6]). A listing shows README,
// the source's own layout and the presets; every other valid name is made on its first lookup,
// so `find` or `cp -r` never walk hundreds of synthetic checkpoints. Rank files are made when
// looked up or listed, so a DP-65536 target costs O(params) until someone asks for its files.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "zeromount/ds/model_root.h"
#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/torch_state.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/files/dcp_files.h"
#include "zeromount/view/files/layout_files.h"
#include "zeromount/view/files/torch_layouts.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view_options.h"

namespace zm::view {

namespace {

namespace fs = std::filesystem;

// The partition plans of a layouts/ folder's targets, the few used last kept, within kPlanBudget
// bytes. A plan costs O(params) of memory and anyone may look up any number of target names, so
// what the tree keeps is how to make a plan again, never the plan itself.
class Plans {
 public:
  static constexpr size_t kKeep = 8;
  // Throws zm::Error when the source cannot be presented at `target`.
  std::shared_ptr<const LayoutTag> get(const MountedTag& tag, const ds::TargetLayout& target) const {
    return memo_.get({&tag, ds::target_name(target)}, [&] {
      // Counted for the test that plans are made before the tree's exclusive lock (LazyDir::prepare).
      if (Tree::exclusive_here()) plan_weight().made_under_tree_lock.fetch_add(1, std::memory_order_relaxed);
      return std::make_shared<const LayoutTag>(tag, target);
    });
  }
  // get() ahead of a lookup or an append, holding no tree lock (LazyDir::prepare, prepare_tag):
  // false when the tag cannot be presented at `target`, which the lookup or append then says.
  bool prepare(const MountedTag& tag, const ds::TargetLayout& target) const {
    try {
      get(tag, target);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // A target is served whole or not at all: every tag has its plan, or zm::Error names why not.
  // The listing, a lookup and a tag indexed after the mount all decide here.
  void check(const std::vector<const MountedTag*>& tags, const ds::TargetLayout& target) const {
    for (const MountedTag* t : tags) get(*t, target);
  }

 private:
  mutable Memo<std::pair<const MountedTag*, std::string>, LayoutTag, kKeep> memo_{
      kPlanBudget, [](const LayoutTag& p) { return p.bytes(); }, &plan_weight()};
};

// The rank files of one tag folder of a target: named on demand, built on open.
class RankFiles final : public LazyDir {
 public:
  RankFiles(std::shared_ptr<const Plans> plans, const MountedTag& tag, ds::TargetLayout target, struct timespec mtime)
      : plans_(std::move(plans)), tag_(&tag), target_(std::move(target)), mtime_(mtime) {}
  void prepare(std::string_view) const override { layout(); }
  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    const std::shared_ptr<const LayoutTag> layout = this->layout();
    const auto k = layout->file_index(name);
    if (!k) return 0;
    auto plans = plans_;
    const MountedTag* tag = tag_;
    const ds::TargetLayout target = target_;
    const uint64_t file = *k;
    Builder build = [plans, tag, target, file] { return plans->get(*tag, target)->build(file); };
    if (!layout->sized())
      return tree.add_file(dir, std::string(name), mtime_, std::move(build), Inode::kUnknown, false);
    // `ls -l` of thousands of ZeRO-3 rank files: sized without building each one.
    return tree.add_file(
        dir, std::string(name), mtime_, std::move(build),
        [plans, tag, target, file] { return plans->get(*tag, target)->size(file); }, false);
  }
  uint64_t listed() const override { return layout()->files(); }
  std::string listed_name(uint64_t k) const override { return layout()->file_name(k); }

 private:
  std::shared_ptr<const LayoutTag> layout() const { return plans_->get(*tag_, target_); }
  std::shared_ptr<const Plans> plans_;
  const MountedTag* tag_;
  ds::TargetLayout target_;
  struct timespec mtime_;
};

// layouts/: every valid target name resolves; the listing shows the own layout and the presets.
// A tag indexed after the mount joins every target (add), a deleted one leaves the targets made
// later (drop); the tag list is read and changed under the tree's exclusive lock only (make and
// Tree::append). A target is a whole checkpoint folder: beside `latest` and its tag folders it
// shows every other real entry of the folder it fakes (a Trainer's trainer_state.json,
// scheduler.pt, rng_state_*.pth, ...), so that what loads the folder finds what it needs.
class Targets final : public LazyDir {
 public:
  Targets(std::vector<const MountedTag*> tags, std::vector<std::string> listed, const CheckpointFolder* folder,
          FileTable* files, std::shared_ptr<const DcpPlans> dcp_plans, bool has_latest, uint64_t max_shard_bytes,
          struct timespec mtime)
      : tags_(std::move(tags)),
        listed_(std::move(listed)),
        folder_(folder),
        files_(files),
        dcp_plans_(std::move(dcp_plans)),
        has_latest_(has_latest),
        max_shard_bytes_(max_shard_bytes),
        mtime_(mtime) {}

  // A target's plans, one per tag, made before make() takes the tree's lock. A tag that cannot be
  // presented is left to make(), which refuses the target with the reason.
  void prepare(std::string_view name) const override {
    const auto target = ds::parse_target(name);
    if (!target) return;
    for (const MountedTag* t : present())
      if (!plans_->prepare(*t, *target)) return;
  }

  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    if (const auto torch = parse_torch_layout(name)) return make_torch(tree, dir, name, *torch);
    const auto target = ds::parse_target(name);
    if (!target) return 0;  // one layout, one name: every other spelling is ENOENT
    std::vector<const MountedTag*> tags = present();
    for (;;) {
      try {  // every tag must be presentable at the target, or the target is refused
        plans_->check(tags, *target);
        break;
      } catch (const Error& e) {
        // A tag deleted while its plan was made (its files gone mid-read) is left out, and the
        // target made of the rest: a valid name never gets an ENOENT for a lost tag.
        if (std::vector<const MountedTag*> now = present(); now.size() < tags.size()) {
          tags = std::move(now);
          continue;
        }
        refuse(tree, dir, name, e.what());
        return 0;
      }
    }
    const uint64_t d = tree.add_dir(dir, std::string(name), mtime_, false);
    // Tags saved later join it: a listing must not be kept as complete (growing, like its folder).
    tree.set_growing(d, tree.get(folder_->ino())->folder().growing.load());
    if (has_latest_) {
      const CheckpointFolder* folder = folder_;
      add_live_text(
          tree, d, "latest", [folder] { return folder->latest_text(); }, mtime_);
    }
    copy_real_entries(tree, *folder_, d, [](const Inode& n) { return n.name != "latest"; });
    for (const MountedTag* t : tags) add_tag_dir(tree, d, *t, *target);
    return d;
  }
  uint64_t listed() const override { return listed_.size(); }
  std::string listed_name(uint64_t k) const override { return listed_.at(k); }

  // A tag indexed after the mount: in every target made so far, and in those made later.
  // A deleted tag: targets made from now on are made without it.
  void drop(const MountedTag& tag) const {
    std::lock_guard<std::mutex> lock(tags_mu_);
    std::erase(tags_, &tag);
  }

  // add()'s plans for `tag`, made before the tree's lock: one per listed target and per target made
  // so far. A plan that fails is left to add(), which says why.
  void prepare_tag(const Tree& tree, uint64_t dir, const MountedTag& tag) const {
    std::vector<std::string> names = listed_;
    for (std::string& name : tree.names(dir)) names.push_back(std::move(name));
    for (const std::string& name : names)
      if (const auto target = ds::parse_target(name)) plans_->prepare(tag, *target);
  }

  void add(Tree& tree, uint64_t dir, const MountedTag& tag) const {
    for (const std::string& name : listed_) {  // a listed name must keep resolving
      try {
        plans_->check({&tag}, *ds::parse_target(name));
      } catch (const Error& e) {
        spdlog::error("layouts: {} not added (it cannot be shown at the listed {}): {}", tag.index->tag, name,
                      e.what());
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(tags_mu_);
      tags_.push_back(&tag);
    }
    std::vector<std::pair<std::string, uint64_t>> made;
    for (const auto& [name, ino] : tree.get(dir)->folder().by_name)
      if (tree.get(ino)->is_dir()) made.emplace_back(name, ino);
    for (const auto& [name, ino] : made) {
      if (!ds::parse_target(name)) continue;  // a torch layout is of the tag `latest` named when made
      try {
        const ds::TargetLayout target = *ds::parse_target(name);
        plans_->get(tag, target);  // refused here if the tag cannot be shown at this target
        add_tag_dir(tree, ino, tag, target);
      } catch (const Error& e) {
        spdlog::error("layouts/{}: {} not added: {}", name, tag.index->tag, e.what());
      }
    }
  }

 private:
  // The tags whose folders are still there. A keep-last-N cleanup deletes tag folders between two
  // rescans, and a target made from a deleted tag would fail on its files: a valid name would get
  // an ENOENT that the kernel then keeps. A target is made of the tags that remain.
  std::vector<const MountedTag*> present() const {
    std::vector<const MountedTag*> out;
    std::vector<const MountedTag*> tags;
    {
      std::lock_guard<std::mutex> lock(tags_mu_);
      tags = tags_;
    }
    for (const MountedTag* t : tags) {
      std::error_code ec;
      if (fs::exists(t->index->dir, ec)) out.push_back(t);
    }
    return out;
  }

  void refuse(Tree& tree, uint64_t dir, std::string_view name, const std::string& why) const {
    if (refused_.size() >= 1024) refused_.clear();  // bounded: anyone may look up any valid name
    if (refused_.insert(std::string(name)).second) spdlog::error("layouts/{}: {}", name, why);
    folder_->refuse_entry(tree.get(dir)->name + "/" + std::string(name), why);
  }

  // fsdp-dp<W>, torch: a checkpoint folder of torch's own formats, of the tag `latest` names.
  uint64_t make_torch(Tree& tree, uint64_t dir, std::string_view name, TorchLayout layout) const {
    const std::vector<const MountedTag*> tags = present();
    if (tags.empty()) return 0;
    const MountedTag* own = tags.back();
    if (const auto latest = folder_->latest_tag())
      for (const MountedTag* t : tags)
        if (t->index->tag == *latest) own = t;
    if (const std::string why = ds::torch_state_refusal(*own->index); !why.empty()) {
      refuse(tree, dir, name, own->index->tag + ": " + why);
      return 0;
    }
    if (layout.fsdp_world > 0) {  // its folders' plans grow with the chunks: refuse what is too big
      DcpShape all;
      all.world = layout.fsdp_world;
      if (const std::string why = dcp_size_refusal(*own, all); !why.empty()) {
        refuse(tree, dir, name, own->index->tag + ": " + why + "; a smaller W loads at any world size");
        return 0;
      }
    }
    const uint64_t d = tree.add_dir(dir, std::string(name), mtime_, false);
    copy_real_entries(tree, *folder_, d, torch_layout_keeps);
    add_torch_layout(tree, d, *own, layout, max_shard_bytes_, dcp_plans_, mtime_);
    if (own->index->source == ds::SourceKind::Dcp) add_tag_files(tree, d, *own);
    return d;
  }

  // A Trainer's FSDP checkpoint-N/ is itself the tag of a DCP source: its trainer_state.json,
  // scheduler.pt and rng_state_*.pth lie in the tag folder, beside pytorch_model_fsdp_0/ and
  // optimizer_0/, and a resume from the layout needs them (without trainer_state.json the Trainer
  // starts again at step 0: the FSDP2 judge, docs/oracle-results.md). The tag folder's regular
  // files but DCP's own are shown as they are.
  void add_tag_files(Tree& tree, uint64_t d, const MountedTag& t) const {
    const ds::Dir dir = ds::open_dir(t.index->dir);
    std::error_code ec;
    for (const ds::Dir::Entry& e : dir.ok() ? dir.list(ec) : std::vector<ds::Dir::Entry>{}) {
      struct stat st {};
      if (e.name == ".metadata" || e.name.ends_with(".distcp") || tree.lookup(d, e.name) || !dir.stat(e.name, st) ||
          !S_ISREG(st.st_mode))
        continue;
      try {
        add_real_file(tree, *files_, d, e.name, t.index->dir + "/" + e.name);
      } catch (const Error& err) {  // gone since listed, or not readable: not shown, as in a mirror
        spdlog::warn("{}/{}: not shown: {}", t.index->dir, e.name, err.what());
      }
    }
  }

  void add_tag_dir(Tree& tree, uint64_t target_dir, const MountedTag& tag, const ds::TargetLayout& target) const {
    const uint64_t tag_dir = tree.add_dir(target_dir, tag.index->tag, mtime_);
    tree.set_lazy(tag_dir, std::make_shared<RankFiles>(plans_, tag, target, mtime_));
  }

  // Changed under the tree's exclusive lock (add, drop) and read by prepare(), which holds no tree
  // lock: its own mutex, a leaf.
  mutable std::mutex tags_mu_;
  mutable std::vector<const MountedTag*> tags_;
  std::vector<std::string> listed_;
  const CheckpointFolder* folder_;
  FileTable* files_;                           // the View's, which outlives this folder
  std::shared_ptr<const DcpPlans> dcp_plans_;  // the View's: fsdp-dp<W>'s folders
  bool has_latest_;                            // the folder has a `latest`, which every target shows
  uint64_t max_shard_bytes_;
  struct timespec mtime_;
  mutable std::set<std::string> refused_;  // make() runs under the tree's exclusive lock
  std::shared_ptr<const Plans> plans_ = std::make_shared<const Plans>();
};

// What the own layout is: the real files, written anew; or, for a tensor-/pipeline-parallel source,
// its grid merged to TP = PP = 1, which no real file of it is.
std::string own_note(const ds::TagIndex& ix) {
  if (ix.source == ds::SourceKind::Dcp)
    return "a " + ix.source_style + " DCP save at W=" + std::to_string(ix.dp) +
           ": DeepSpeed never wrote it, and this layout is made up like any other (below)";
  if (!ix.parallel())
    return "a self-check: tensor-equal to the real files (same keys, values, dtypes, shapes and storage\n"
           "sharing), not byte-equal: the pickles and zip records are written anew";
  return "its TP=" + std::to_string(ix.tp) + " x PP=" + std::to_string(ix.pp) + " x DP=" + std::to_string(ix.dp) +
         " grid merged to TP=1 and PP=1: the state of its universal tensors laid\n"
         "out natively for a TP=1 engine, not its own files";
}

// What the native layouts of a source without DeepSpeed model-state files hold that none of its
// files says (ds/model_root.h); "" for a DeepSpeed source.
std::string made_up_note(const ds::TagIndex& ix) {
  if (ix.source != ds::SourceKind::Dcp) return "";
  return "Made up for " + ix.tag + " (a " + ix.source_style +
         " DCP save has no DeepSpeed model-state file; ds/model_root.h):\n"
         "  module: the DCP model keys: trainable parameters (the optimizer's) in the target's precision,\n"
         "    frozen parameters (keys cut like FSDP2's parameters, outside the optimizer) cast to it,\n"
         "    buffers (keys saved whole) as saved; its _metadata is absent\n"
         "  buffer_names: those buffers; param_shapes: the optimizer's param_groups order; shared_params: {}\n"
         "  global_steps: the optimizer's step; skipped_steps: 0; global_samples: absent (the engine takes\n"
         "    global_steps x its train_batch_size); dp_world_size: the target's W; mp_world_size: 1\n"
         "  lr_scheduler: " +
         ds::scheduler_note(ix) +
         "\n"
         "  ds_config: {'zero_optimization': {'stage': 2}, 'bf16'/'fp16': {'enabled': the module dtype}}\n"
         "  ds_version: " +
         ds::kMadeDsVersion +
         " (the loaders the files are made for); loss scaler: DeepSpeed's default\n"
         "    (static 1; fp16 targets dynamic, 2^16); clip_grad 0.0 (a DCP save keeps none): DeepSpeed's\n"
         "    ZeRO-1/2 load takes clip_grad from these files, not from the engine's gradient_clipping, so set\n"
         "    engine.optimizer.clip_grad after load_checkpoint to clip (docs/oracle-results.md)\n";
}

std::string readme(const std::string& dir, const std::string& own, const std::string& note,
                   const std::vector<std::string>& listed, const std::vector<std::string>& refused,
                   const std::string& made_up) {
  std::ostringstream s;
  s << "Faked native layouts (zeromount; docs/spec/fake-layouts.md)\n\n"
    << "Each " << dir << "/<target>/ is a load_dir that looks as if DeepSpeed had saved this checkpoint\n"
    << "natively at another ZeRO stage, DP size and precision: engine.load_checkpoint() loads it without\n"
    << "load_universal, and zero_to_fp32.py / ds_to_universal.py read it like a real one.\n\n"
    << "Names (one spelling each; any other is 'No such file or directory'):\n"
    << "  " << ds::kTargetGrammar << "\n"
    << "  -rr: round_robin_gradients (ZeRO-1/2); -sg<N>: ZeRO-3 sub_group_size N, left out at the default\n"
    << "  1000000000; bf16opt: BF16_Optimizer (bf16)\n"
    << "Without DeepSpeed (README \"Leave DeepSpeed\"), for the tag `latest` names:\n"
    << "  fsdp-dp<W>              the Trainer and Accelerate under FSDP at W ranks: pytorch_model_fsdp_0/\n"
    << "                          and optimizer_0/, DCP folders cut where FSDP2 shards (any W loads them)\n"
    << "  torch                   the plain Trainer: model.safetensors (fp32 masters) and optimizer.pt\n"
    << "                          (torch's optimizer state_dict); not for pipeline-parallel or AutoEP sources\n\n"
    << "This checkpoint's own layout: " << own << "\n(" << note << ")\n"
    << "Listed here (the own layout and the presets of -o layouts=a,b):";
  for (const auto& n : listed) s << " " << n;
  s << "\n";
  for (const auto& r : refused) s << "Not listed: " << r << "\n";
  s << "Any other valid name is made when it is first looked up, e.g. " << dir << "/zero3-dp64-bf16.\n"
    << "A target is served whole or not at all: one the source cannot be presented at is 'No such file\n"
    << "or directory', with one log line that names the reason.\n";
  if (!made_up.empty()) s << "\n" << made_up;
  return s.str();
}

class LayoutsProvider final : public Provider {
 public:
  std::string_view kind() const override { return "layouts"; }

  // add_folder makes the folder for every tag; a tag indexed later joins it.
  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    if (cx.building()) return;
    if (const Targets* t = targets(cx)) t->add(cx.tree(), layouts_dir(cx), tag);
  }

  void prepare_tag(ProviderContext& cx, const MountedTag& tag) const override {
    if (const Targets* t = targets(cx)) t->prepare_tag(cx.tree(), layouts_dir(cx), tag);
  }

  void drop_tag(ProviderContext& cx, const MountedTag& tag) const override {
    if (const Targets* t = targets(cx)) t->drop(tag);
  }

  void add_folder(ProviderContext& cx, const std::vector<const MountedTag*>& tags) const override {
    if (tags.empty()) return;
    const ViewOptions& o = cx.options();
    const struct timespec mtime = cx.mtime();
    // The own layout is that of the tag `latest` names (else the last one).
    const MountedTag* own_tag = tags.back();
    for (const MountedTag* t : tags)
      if (cx.latest() && t->index->tag == *cx.latest()) own_tag = t;
    const std::string own = ds::target_name(ds::source_layout(*own_tag->index, ds::source_options(*own_tag->index)));
    // The plans made to check the listed names are let go with it: a plan holds its source's
    // model-state file open, and targets only listed cost nothing.
    const Plans checked;
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
        checked.check(tags, *target);
      } catch (const Error& e) {
        spdlog::error("{}/{}: not listed: {}", o.layouts_dir, name, e.what());
        cx.folder().refuse_entry(o.layouts_dir + "/" + name, e.what());
        refused.push_back(name + ": " + relative_to(cx.folder().path(), e.what()));
        continue;
      }
      listed.push_back(name);
    }
    const uint64_t dir = cx.add_made_dir(o.layouts_dir, *this, tags);
    if (!dir) return;  // a real SRC/layouts wins (ProviderContext logged it); -o layouts_dir=NAME
    cx.add_text(dir, "README",
                readme(o.layouts_dir, own, own_note(*own_tag->index), listed, refused, made_up_note(*own_tag->index)),
                mtime);
    // `latest` as the folder's own shows it, and its other real files as they are [layouts §1.1].
    // Only a `latest` DeepSpeed could have written (a live one, kLatestMaxBytes at most) is carried:
    // one over that is any other file, shown as is, and nothing is made from it.
    const Inode* latest = cx.tree().lookup(cx.dir(), "latest");
    const bool has_latest = latest && latest->is_live();
    cx.tree().set_lazy(dir, std::make_shared<Targets>(tags, std::move(listed), &cx.folder(), &cx.files(),
                                                      cx.dcp_plans(), has_latest, o.max_shard_bytes, mtime));
  }

 private:
  // The layouts/ folder this provider made in cx's folder, if any (a real one of that name wins).
  static uint64_t layouts_dir(ProviderContext& cx) { return cx.tree().lookup(cx.dir(), cx.options().layouts_dir)->ino; }
  const Targets* targets(ProviderContext& cx) const {
    const Inode* dir = cx.tree().lookup(cx.dir(), cx.options().layouts_dir);
    if (!dir || dir->made_by != this) return nullptr;
    return dynamic_cast<const Targets*>(dir->folder().lazy.get());
  }
};

}  // namespace

std::unique_ptr<Provider> make_layouts_provider() {
  return std::make_unique<LayoutsProvider>();
}

}  // namespace zm::view
