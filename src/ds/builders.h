#pragma once
// The indexers of each optimizer family, behind index_tag(); private to src/ds.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "zeromount/ds/shard_set.h"
#include "zeromount/ds/tag_index.h"

namespace zm::ds {

struct TagFiles {
  std::vector<std::string> optim;  // by dp rank
  std::vector<std::string> model;  // stage 1/2: [mp_rank_00]; stage 3: by dp rank
  // AutoEP (stage 1/2): fused expert parameters by name, with the expert-DP size their param group
  // is partitioned over. Every dp rank holds one EP rank's share, so the dp ranks together hold
  // ep_size copies' worth of elements; their weights are in the per-expert files, not 'module'.
  std::map<std::string, int> expert_dp;
};
// The regular files of a tag folder (links to files followed) as (name, path), in listing order.
// Other entries are skipped, but a file name DeepSpeed writes that cannot be followed (a link loop)
// throws zm::Error naming it, as does a folder that cannot be listed: that refuses one tag, with
// its reason, never the whole mount.
std::vector<std::pair<std::string, std::string>> tag_folder_files(const std::string& dir);

// `rank0` is the already opened optimizer file of dp rank 0 (it told us the stage).
void index_zero12(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0);
void index_zero3(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0);

}  // namespace zm::ds
