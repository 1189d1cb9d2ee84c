#pragma once
// One indexed tag as the view serves it: its index plus the view-wide file id of each shard.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/pt/value.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/tree.h"

namespace zm::view {

struct MountedTag {
  const ds::TagIndex* index = nullptr;
  std::vector<uint32_t> file_of_shard;  // FileTable id of TagIndex::shards[k]
  Access folder;                        // the tag folder's: what a made-up folder of this tag may be
  Access files;                         // the least readable of its shards: what a made-up file of this tag may be
  // -o crc: where made-up .pt files read their tensors to compute real CRC-32s; nullptr: CRC 0.
  const pt::ExtentReader* crc_source = nullptr;
  // How a made-up .pt file of this tag is written: `prefix` names its archive as torch.save does
  // (the stem of the path it writes; "archive" for an open file), and its CRCs follow -o crc.
  pt::PtOptions pt_options(std::string prefix) const {
    pt::PtOptions o;
    o.prefix = std::move(prefix);
    o.crc_source = crc_source;
    return o;
  }
  // An extent of the index (shard-relative) as an extent of the view's file table.
  pt::Extent map(const pt::Extent& e) const { return {file_of_shard.at(e.file), e.offset, e.length}; }
  // map() as a function object, for what takes a ds::ExtentMap (the tag must outlive it).
  auto mapper() const {
    return [this](const pt::Extent& e) { return map(e); };
  }
  // The trainable parameters in the order of the model-state file's `module` (ds::module_order),
  // read the first time it is asked for and then kept, so that what is laid out from it (a report
  // page sized at stat, then built) agrees even if that file is deleted or rewritten meanwhile.
  // A file that cannot be read gives the index's order.
  const std::vector<size_t>& module_order() const {
    std::call_once(module_order_once_, [this] {
      try {
        module_order_ = ds::module_order(*index);
      } catch (const Error&) {
        module_order_.clear();
        for (size_t k = 0; k < index->params.size(); ++k) module_order_.push_back(k);
      }
    });
    return module_order_;
  }

 private:
  mutable std::once_flag module_order_once_;
  mutable std::vector<size_t> module_order_;
};

// A served tag named by its path inside a folder ("global_step3", "checkpoint-2/global_step2").
struct NamedTag {
  std::string path;
  const MountedTag* tag = nullptr;
};

}  // namespace zm::view
