#pragma once
// Reading torch.distributed.checkpoint's `.metadata` [dcp §2]: the pickle decoded by
// the safe pickle machine (nothing runs, no size is trusted) into plain structs, every key
// checked so that a damaged folder is refused by name before anything is served from it. The
// writer of the same file is dcp.h; an item's own bytes are dcp_item.h.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "zeromount/pt/dtype.h"
#include "zeromount/pt/file.h"

namespace zm::pt::dcp {

// torch's _StorageInfo: the item is bytes [offset, offset + length) of `relative_path`, a file of
// the checkpoint folder (checked: not absolute, no `..`).
struct StorageInfo {
  std::string relative_path;
  uint64_t offset = 0, length = 0;
};

// A ChunkStorageMetadata with the storage_data entry that holds it (MetadataIndex(fqn, offsets)).
// A bytes item has one, its offsets and sizes empty; so has a 0-d tensor.
struct StoredChunk {
  std::vector<int64_t> offsets, sizes;
  StorageInfo storage;
};

// One key of state_dict_metadata. The chunks of a tensor cover every element exactly once.
struct StoredKey {
  std::string fqn;                                       // "optimizer.state.fc1.weight.exp_avg"
  std::vector<std::variant<std::string, int64_t>> path;  // planner_data; empty when the file has none
  bool tensor = true;                                    // false: BytesStorageMetadata
  DType dtype = DType::F32;
  std::vector<int64_t> size;
  std::vector<StoredChunk> chunks;  // in TensorStorageMetadata.chunks' order
};

struct ReadMetadata {
  std::string path;  // the `.metadata` file, named by every later refusal
  std::string version;
  std::optional<std::string> checkpoint_id;  // storage_meta.checkpoint_id: where it was saved
  std::vector<StoredKey> keys;               // in the file's order
};

// Decodes and checks a `.metadata` pickle; `path` names it in errors. Throws FormatError naming
// the path and the key for: a class or field that is not DCP's, a key without its storage_data
// entry, a chunk outside its tensor, chunks that overlap or leave a hole, a relative_path that
// leaves the folder, an item whose bytes are transformed (transform_descriptors).
ReadMetadata read_metadata(std::string_view bytes, const std::string& path);
// The same from an open `.metadata` file.
ReadMetadata read_metadata(const File& file);

// The size of a data file of the folder by relative path; nullopt when it does not exist.
using DataFileSize = std::function<std::optional<uint64_t>(const std::string& relative_path)>;
// Refuses (FormatError naming the `.metadata` and the key) an item whose data file is missing or
// ends before the item does. Each data file is asked for once.
void check_against_files(const ReadMetadata& md, const DataFileSize& size_of);
// check_against_files with the sizes of the files of `folder` (stat, following links).
void check_folder(const ReadMetadata& md, const std::string& folder);

}  // namespace zm::pt::dcp
