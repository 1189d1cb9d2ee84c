#pragma once
// Finding tags in a checkpoint folder and indexing them.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/tag_index.h"

namespace zm::ds {

struct CheckpointDir {
  std::string root;                   // absolute
  std::optional<std::string> latest;  // content of `latest`, stripped
  std::vector<std::string> tags;      // sub-folders that are tags of a source kind (sources.h), in tag_order
  bool root_is_tag = false;           // the folder itself holds the shards
  // Entries not looked into, with why: a link that leads into the mount itself (ds::resolve).
  std::vector<std::pair<std::string, std::string>> refused;
};

// A folder of SRC opened (source_dir.h), with its path (absolute, links resolved).
struct OpenFolder {
  std::string path;
  Dir dir;
};

// `skip`: a path never looked into (the view's own mount point, which may lie inside `path`).
CheckpointDir scan_checkpoint(const std::string& path, const std::string& skip = "");
// The same for a folder whose path is already absolute with its links resolved (one the view
// filled): opened by descriptor, at the same cost at any depth. `named`: how errors name it.
CheckpointDir scan_folder(const std::string& root, const std::string& skip, const std::string& named = "");
// Whether a sub-folder of `dir` (not `skip`) satisfies `is`; stops at the first one found.
bool any_folder_in(const OpenFolder& dir, const std::string& skip, const std::function<bool(const OpenFolder&)>& is);
// Whether a sub-folder of `dir` (not `skip`) is a tag of any source kind (sources.h), i.e. `dir`
// is a checkpoint folder.
bool holds_tag_folder(const OpenFolder& dir, const std::string& skip = "");
bool holds_tag_folder(const std::string& dir, const std::string& skip = "");
// SRC's `latest` byte for byte (DeepSpeed writes the tag without a newline), or nothing when it is
// absent, not a regular file, over kLatestMaxBytes or unreadable. DeepSpeed rewrites it after every save.
// A link is not followed: DeepSpeed writes a file, and what a link names could be any file the
// daemon may read (/etc/shadow), which error lines would then quote to other users.
inline constexpr int64_t kLatestMaxBytes = 4096;
std::optional<std::string> read_latest(const std::string& root);
std::optional<std::string> read_latest(const Dir& root);
// The tag a `latest` text names, read as DeepSpeed reads it (`fd.read().strip()`).
std::string latest_tag(std::string_view text);
// Tag names in training order: embedded numbers compare as numbers (global_step20 < global_step100).
bool tag_order(const std::string& a, const std::string& b);

// Indexes one tag folder. Reads only pickles. Throws zm::Error naming the file (and parameter)
// when the checkpoint is incomplete, inconsistent or of a layout that is not supported.
// `tp_strict` refuses universal_checkpoint_info patterns that match no parameter, as
// ds_to_universal.py does without --no_strict.
// Dispatches to the source reader the folder is a tag of (sources.h).
std::unique_ptr<TagIndex> index_tag(const std::string& tag_dir, bool tp_strict = true);
// DeepSpeed's reader: the folder's *_optim_states.pt and model-state files.
std::unique_ptr<TagIndex> index_deepspeed(const std::string& tag_dir, bool tp_strict);
// Whether `dir` holds *_optim_states.pt files (by name): a DeepSpeed tag.
bool holds_optim_states(const Dir& dir);

// Positions in index.params in the order the model holds them (its state dict's 'module' in the
// first model-state file), where the index keeps them group by group. Parameters 'module' does not
// name follow in index order. Reads one pickle; throws zm::Error when it cannot be read.
std::vector<size_t> module_order(const TagIndex& index);

}  // namespace zm::ds
