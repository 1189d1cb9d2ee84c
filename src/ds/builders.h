#pragma once
// The indexers of each optimizer family, behind index_tag(); private to src/ds.
#include <map>
#include <string>
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
// `rank0` is the already opened optimizer file of dp rank 0 (it told us the stage).
void index_zero12(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0);
void index_zero3(TagIndex& index, ShardSet& shards, const TagFiles& files, OpenShard& rank0);

}  // namespace zm::ds
