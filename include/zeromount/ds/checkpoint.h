#pragma once
// Finding tags in a checkpoint folder and indexing them.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeromount/ds/param_index.h"

namespace zm::ds {

struct CheckpointDir {
  std::string root;                   // absolute
  std::optional<std::string> latest;  // content of `latest`, stripped
  std::vector<std::string> tags;      // sub-folders that hold *_optim_states.pt files, sorted
  bool root_is_tag = false;           // the folder itself holds the shards
};

CheckpointDir scan_checkpoint(const std::string& path);

// Indexes one tag folder. Reads only pickles. Throws zm::Error naming the file (and parameter)
// when the checkpoint is incomplete, inconsistent or of a layout that is not supported.
std::unique_ptr<TagIndex> index_tag(const std::string& tag_dir);

// Builders, one per optimizer family (index_zero12.cpp, index_zero3.cpp).
class ShardSet;
struct OpenShard;
struct TagFiles {
  std::vector<std::string> optim;   // by dp rank
  std::vector<std::string> model;   // stage 1/2: [mp_rank_00]; stage 3: by dp rank
};
// `rank0` is the already opened optimizer file of dp rank 0 (it told us the stage).
void index_zero12(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0);
void index_zero3(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0);

}  // namespace zm::ds
