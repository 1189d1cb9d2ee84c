#pragma once
// A torch.distributed.checkpoint (DCP) folder as a training state [dcp]: what FSDP2's
// get_state_dict, torchtitan, and the Trainer and Accelerate under FSDP save. Its second producer
// after DeepSpeed's index: the same TagIndex, whose states are the chunks of the folder's keys.
#include <memory>
#include <string>

#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/tag_index.h"

namespace zm::ds {

// Whether `dir` is a DCP tag: it holds a `.metadata`, or a Trainer/Accelerate checkpoint-N/ holds
// one in pytorch_model_fsdp_0/ (with the optimizer's in optimizer_0/ beside it).
bool is_dcp_tag(const Dir& dir);

// Reads the folder's `.metadata` files and the storage records of its items (no tensor byte):
// - trainable parameters are the ones the optimizer keeps state for, in its param groups' order
//   (`params` lists; torchtitan keeps none: its groups are the parameters of equal
//   hyper-parameters, in the model's order); their fp32 state is the model key's chunks;
// - every other model key is a buffer (DCP does not say which of them are frozen parameters);
// - a model-only save has every model key as a parameter and no optimizer state.
// Chunks cut at dim 0 (FSDP2's Shard(0)) are runs of the flat tensor; any other cut is refused
// with its key named. Throws zm::Error naming the file and the key.
std::unique_ptr<TagIndex> index_dcp(const std::string& tag_dir);

}  // namespace zm::ds
