#pragma once
// A Provider makes one kind of made-up folder (the universal checkpoint, the browsing folder,
// consolidated weights, ...). Every kind is registered once, in providers.cpp; the View, the
// FUSE adapter and `export` know only this interface, so adding a kind touches none of them.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeromount/view/file_table.h"
#include "zeromount/view/tree.h"
#include "zeromount/view/universal.h"

namespace zm::view {

struct ViewOptions;

// A real entry's owner and permission bits, without write bits (the view is read-only).
Access access_of(const struct stat& st);
// The most any of `all` allows: bits all of them grant, owner classes only where owners agree.
Access least_of(const std::vector<Access>& all);

// What a provider may use while the tree is built: the tree, the file table and the options.
// A tag that could not be indexed: it keeps its real files and gets no made-up folders.
struct TagError {
  std::string tag, reason;
};

// What live files (Tree::add_live_file) show: the view's current answers, which follow the source
// while mounted. Implemented by the View, which outlives every file that refers to it.
class LiveSource {
 public:
  virtual ~LiveSource() = default;
  // SRC's `latest`, byte for byte, while it names a tag the view serves; else the last text that did.
  virtual std::string latest_text() const = 0;
  // The tag latest_text() names, if the view serves it.
  virtual std::optional<std::string> latest_tag() const = 0;
  virtual std::string errors_text() const = 0;  // one line per tag that is not served, and why
  virtual std::string stats_text() const = 0;   // tags, and the bytes readers took from the shards
};

class ProviderContext {
 public:
  // `mounting`: the tree is being built; false when a tag indexed after the mount is added (then
  // add_root is not called again, and add_tag must extend what add_root made).
  ProviderContext(Tree& tree, FileTable& files, const ViewOptions& opts, const LiveSource& live, bool mounting)
      : tree_(tree), files_(files), opts_(opts), live_(live), mounting_(mounting) {}

  Tree& tree() { return tree_; }
  FileTable& files() { return files_; }
  const ViewOptions& options() const { return opts_; }
  const LiveSource& live() const { return live_; }
  bool mounting() const { return mounting_; }
  // The tag that SRC's `latest` names, if the view serves it.
  std::optional<std::string> latest() const { return live_.latest_tag(); }
  // A text file whose content follows the source (`text` is called on every open).
  uint64_t add_live_text(uint64_t parent, const std::string& name, std::function<std::string()> text,
                         struct timespec mtime);

  // A top-level made-up folder, marked as made by `kind`, readable by no more than the tags it is
  // built from allow (their folders for folders, their least readable shard for files). Returns 0,
  // with one warning, when SRC already has an entry of that name: real entries always win.
  uint64_t add_top_dir(const std::string& name, const char* kind, struct timespec mtime,
                       const std::vector<const MountedTag*>& from);
  // A live text (add_live_text) at the top level; `access`: that of the real entry its text comes from.
  uint64_t add_top_text(const std::string& name, const char* kind, std::function<std::string()> text,
                        struct timespec mtime, Access access);
  // A file that is one whole real file (e.g. a model-state file under another name), with that
  // file's owner and permissions.
  uint64_t add_real_file(uint64_t parent, const std::string& name, const std::string& path);
  // A file whose whole content is known now.
  uint64_t add_text(uint64_t parent, const std::string& name, std::string text, struct timespec mtime);

 private:
  bool taken(const std::string& name);
  Tree& tree_;
  FileTable& files_;
  const ViewOptions& opts_;
  const LiveSource& live_;
  bool mounting_;
};

class Provider {
 public:
  virtual ~Provider() = default;
  // The kind's name: what `export --view` selects and what each made-up top-level entry records.
  virtual const char* kind() const = 0;
  // Adds this kind's folders for one indexed tag. `tag` outlives the tree.
  virtual void add_tag(ProviderContext& cx, const MountedTag& tag) const = 0;
  // Adds top-level entries that depend on every tag (e.g. latest_universal), after all add_tag calls.
  virtual void add_root(ProviderContext& cx, const std::vector<const MountedTag*>& tags) const {}
};

// Every kind, in the order their folders are added. The one place where kinds are registered.
const std::vector<std::unique_ptr<Provider>>& providers();

}  // namespace zm::view
