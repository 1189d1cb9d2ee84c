#pragma once
// Consolidated weights as safetensors, the way zero_to_fp32.py --safe_serialization writes them:
// every tensor in its order (buffers, frozen parameters, trainable parameters, shared aliases),
// split into shards by huggingface_hub's rule, served lazily from the shards.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/files/saved_layout.h"
#include "zeromount/view/mounted_tag.h"

namespace zm::view {

enum class Weights {
  Master,    // the optimizer's master weights (fp32), as zero_to_fp32.py writes them
  Training,  // the module's training precision (bf16/fp16): what people publish for inference
};

// One tensor of the module's state dict as the weights folders hold it: buffers, frozen and
// trainable parameters, then aliases of tied ones (`shares`: the position of the tensor whose
// bytes an alias repeats, else SIZE_MAX). The torch-format views take the same tensors.
struct WeightTensor {
  const std::string* name;
  size_t shares;
  pt::DType dtype;
  const std::vector<int64_t>* shape;
  uint64_t bytes;
  std::function<void(pt::VirtualFile&)> append;  // appends its bytes
};
std::vector<WeightTensor> weight_tensors(const MountedTag& t, Weights which);

// Which tensors go into which file, by huggingface_hub's split_state_dict_into_shards: in order,
// a new shard when the next tensor would tip the current one over `max_bytes`; a tensor larger
// than that alone gets a shard of its own, placed before the one being filled; an alias goes with
// the tensor it shares and is counted once. One shard is `model.safetensors`, more are
// `model-0000K-of-0000N.safetensors` beside `model.safetensors.index.json`.
struct WeightShards {
  std::vector<std::string> files;
  std::vector<std::vector<size_t>> tensors;  // per file: positions in weight order
  std::vector<std::string> names;            // every tensor's name, in weight order
  uint64_t total_size = 0;                   // huggingface_hub's: shared tensors counted once
  bool sharded() const { return files.size() > 1; }
};
// `saved`: the tensors as save_pretrained writes them (saved_layout.h), when it holds rules; else
// (nullptr, or an entry that keeps them) the run-time names and shapes DeepSpeed saved.
WeightShards plan_weights(const MountedTag& t, Weights which, uint64_t max_bytes, const Conversion* saved = nullptr);
// One file of the plan.
pt::VirtualFile weights_file(const MountedTag& t, Weights which, const std::vector<size_t>& tensors,
                             const Conversion* saved = nullptr);
// model.safetensors.index.json: {"metadata": {"total_size"}, "weight_map"}, as json.dumps(indent=2,
// sort_keys=True) writes it.
std::string weights_index(const WeightShards& plan);
// "5GB", "500MB", "2.5GB", "1000" (bytes): huggingface_hub's parse_size_to_int (decimal units);
// throws EINVAL for anything else.
uint64_t parse_shard_size(const std::string& text);

}  // namespace zm::view
