#pragma once
// A Provider makes one kind of made-up folder (the universal checkpoint, the browsing folder,
// consolidated weights, ...). Every kind is registered once, in providers.cpp; the View, the
// FUSE adapter and `export` know only this interface, so adding a kind touches none of them.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/view/file_table.h"
#include "zeromount/view/mounted_tag.h"
#include "zeromount/view/tree.h"

namespace zm::view {

struct ViewOptions;

// A real entry's owner and permission bits, without write bits (the view is read-only).
Access access_of(const struct stat& st);
// The most any of `all` allows: bits all of them grant, owner classes only where owners agree.
Access least_of(const std::vector<Access>& all);

// A file that is one whole real file, with that file's owner and permissions.
uint64_t add_real_file(Tree& tree, FileTable& files, uint64_t parent, const std::string& name, const std::string& path);
// `text` with every "<root>/" taken out: a reason quoted to users names paths below the folder they
// see, never where the source lives (`.zeromount/errors`, layouts/README).
std::string relative_to(const std::string& root, std::string text);
// A file whose whole content is known now.
uint64_t add_text(Tree& tree, uint64_t parent, const std::string& name, std::string text, struct timespec mtime);

// A text file whose content follows the source (`text` is called on every open).
uint64_t add_live_text(Tree& tree, uint64_t parent, const std::string& name, std::function<std::string()> text,
                       struct timespec mtime);

// A tag that could not be indexed: it keeps its real files and gets no made-up folders. `tag` is
// its path inside the mount ("global_step3", "run/checkpoint-2/global_step2").
struct TagError {
  std::string tag, reason;
};

// What the mount-wide live files (.zeromount/) show: the view's current answers, which follow the
// source while mounted. Implemented by the View, which outlives every file that refers to it.
class LiveSource {
 public:
  virtual ~LiveSource() = default;
  // One line per tag that is not served, and why: the lines about what `who` may read.
  virtual std::string errors_text(const Caller& who) const = 0;
  // Tags, and the bytes readers took from the shards: `who`'s own processes only.
  virtual std::string stats_text(const Caller& who) const = 0;
};

// One checkpoint folder (a DeepSpeed load_dir: SRC, a Trainer's checkpoint-N/, ...): a real folder
// that holds tag folders, beside which providers put their made-up entries. Its `latest` follows
// the source. Implemented by the View; it outlives every file that refers to it.
class CheckpointFolder {
 public:
  virtual ~CheckpointFolder() = default;
  virtual uint64_t ino() const = 0;             // its folder in the tree
  virtual const std::string& path() const = 0;  // the real folder, absolute
  virtual std::string mount_path() const = 0;   // its path in the mount: "/", "/run/checkpoint-2"
  // Its `latest`, byte for byte, while it names a tag the view serves; else the last text that did.
  virtual std::string latest_text() const = 0;
  // The tag latest_text() names, if the view serves it.
  virtual std::optional<std::string> latest_tag() const = 0;
  // Whether `name` is one of its tag folders (served or not): a faked layout shows its own instead.
  virtual bool is_tag(const std::string& name) const = 0;
  // The tags it serves now, in training order (ds::tag_order of their paths), after looking for
  // tags saved since its last scan (at most every rescan period). A run folder (no tags of its own,
  // checkpoint folders one level below: a Trainer's output_dir) gives those folders' tags, named
  // "checkpoint-2/global_step2", filling (listing and indexing) the folders not filled yet.
  virtual std::vector<NamedTag> served_tags() const = 0;
  // A made-up entry that is not served, and why (a refused layouts/ target): a line of
  // .zeromount/errors, `entry` being its path inside the folder. Bounded; the first reason stays.
  virtual void refuse_entry(const std::string& entry, const std::string& reason) const = 0;
};

// Another name, in `parent`, for each real entry of `folder` that `keep` accepts (real entries
// only: no tag folder, no made-up or live entry), in listing order; folders become plain copies.
void copy_real_entries(Tree& tree, const CheckpointFolder& folder, uint64_t parent,
                       const std::function<bool(const Inode&)>& keep);

class DcpPlans;  // files/dcp_files.h
// A View's DCP plan cache, which it owns and hands to providers (defined with the plans).
std::shared_ptr<const DcpPlans> make_dcp_plans();

class ProviderContext {
 public:
  // `building`: the folder's made-up entries are being made for the first time; false when a tag
  // indexed later is added (then add_folder is not called again, and add_tag must extend what
  // add_folder made).
  ProviderContext(Tree& tree, FileTable& files, const ViewOptions& opts, const LiveSource& live,
                  const CheckpointFolder& folder, std::shared_ptr<const DcpPlans> dcp_plans, bool building)
      : tree_(tree),
        files_(files),
        opts_(opts),
        live_(live),
        folder_(folder),
        dcp_plans_(std::move(dcp_plans)),
        building_(building) {}

  Tree& tree() { return tree_; }
  FileTable& files() { return files_; }
  const ViewOptions& options() const { return opts_; }
  const LiveSource& live() const { return live_; }
  const CheckpointFolder& folder() const { return folder_; }
  // The View's DCP plans, for every DCP folder a provider makes.
  const std::shared_ptr<const DcpPlans>& dcp_plans() const { return dcp_plans_; }
  uint64_t dir() const { return folder_.ino(); }
  // The folder's own mtime: what its made-up entries show.
  struct timespec mtime() const {
    return tree_.get(dir())->mtime;
  }
  bool building() const { return building_; }
  // The tag that the folder's `latest` names, if the view serves it.
  std::optional<std::string> latest() const { return folder_.latest_tag(); }
  uint64_t add_live_text(uint64_t parent, const std::string& name, std::function<std::string()> text,
                         struct timespec mtime) {
    return view::add_live_text(tree_, parent, name, std::move(text), mtime);
  }

  // A made-up folder beside the tags, marked as made by `kind`, readable by no more than the tags
  // it is built from allow (their folders for folders, their least readable shard for files).
  // Returns 0, with one warning, when the folder already has an entry of that name: real entries
  // always win.
  uint64_t add_made_dir(const std::string& name, const Provider& by, const std::vector<const MountedTag*>& from);
  // A live text (add_live_text) beside the tags; `access`: that of the real entry its text comes from.
  uint64_t add_made_text(const std::string& name, const Provider& by, std::function<std::string()> text, Access access);
  // A live file beside the tags (built on every open, never cached, read past the page cache),
  // sized at stat by `sizer`; `costly`: the sizer lists and indexes folders, or lays out what grows
  // with the parameters, so that a listing does not ask it. `access`: what it may show (least_of
  // what it is built from).
  uint64_t add_made_live_file(const std::string& name, const Provider& by, Builder build, Sizer sizer, Access access,
                              bool costly);
  uint64_t add_real_file(uint64_t parent, const std::string& name, const std::string& path) {
    return view::add_real_file(tree_, files_, parent, name, path);
  }
  uint64_t add_text(uint64_t parent, const std::string& name, std::string text, struct timespec mtime) {
    return view::add_text(tree_, parent, name, std::move(text), mtime);
  }

 private:
  bool taken(const std::string& name);
  // Marks a file put beside the tags as made by `by`, readable as `access` allows.
  uint64_t made_file(uint64_t ino, const Provider& by, Access access);
  Tree& tree_;
  FileTable& files_;
  const ViewOptions& opts_;
  const LiveSource& live_;
  const CheckpointFolder& folder_;
  std::shared_ptr<const DcpPlans> dcp_plans_;
  bool building_;
};

class Provider {
 public:
  virtual ~Provider() = default;
  // The kind's name: what `export --view` selects and what each made-up top-level entry records.
  virtual std::string_view kind() const = 0;
  // Adds this kind's entries for one indexed tag, beside it in cx.folder(). `tag` outlives the tree.
  virtual void add_tag(ProviderContext& cx, const MountedTag& tag) const {}
  // Before add_tag of a tag indexed after the mount, holding no lock of the tree (cx's tree is for
  // lookups only): makes what add_tag will need that costs, so that the append stalls no one.
  virtual void prepare_tag(ProviderContext& cx, const MountedTag& tag) const {}
  // Adds entries that depend on every tag of a checkpoint folder (e.g. latest_universal), after
  // the add_tag calls of its tags, once per folder.
  virtual void add_folder(ProviderContext& cx, const std::vector<const MountedTag*>& tags) const {}
  // A served tag was deleted from the source: what is made from now on must not need it.
  virtual void drop_tag(ProviderContext& cx, const MountedTag& tag) const {}
  // A run folder: a folder without tags of its own whose sub-folders are checkpoint folders (a
  // Trainer's output_dir). Called once, when that is first seen; cx.folder().served_tags() gives
  // their tags.
  virtual void add_run(ProviderContext& cx) const {}
  // Adds mount-wide entries at the root (e.g. .zeromount/), once.
  virtual void add_mount(Tree& tree, const LiveSource& live) const {}
  // A real entry `entry` of the checkpoint folder appeared after its made-up folders were added (a
  // config.json or tokenizer file copied in after the save): a kind whose folders carry such
  // entries (copy_real_entries) adds it to them too.
  virtual void add_real(Tree& tree, const CheckpointFolder& folder, const Inode& entry) const {}
};

// Every kind, in the order their folders are added. The one place where kinds are registered.
const std::vector<std::unique_ptr<Provider>>& providers();

}  // namespace zm::view
