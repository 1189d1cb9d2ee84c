#pragma once
// The readers of saved training states, registered in sources.cpp and nowhere else. Each makes
// the same TagIndex from its own files; a new source kind (Megatron's torch_dist next: DCP plus
// metadata.json and common.pt) is one reader and one line there.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zeromount/ds/source_dir.h"
#include "zeromount/ds/tag_index.h"

namespace zm::ds {

struct SourceReader {
  std::string_view name;  // "deepspeed", "dcp"
  // Whether `dir` is a tag of this kind, by its entries' names alone: a scan asks it of every
  // folder, and a folder that cannot be followed (a link loop) must not stop it.
  bool (*is_tag)(const Dir& dir);
  // Indexes the tag folder; throws zm::Error naming the file (and key) when it cannot be shown.
  std::unique_ptr<TagIndex> (*index)(const std::string& tag_dir, bool tp_strict);
  // Whether the index cache keeps its indexes (index_cache.h): DeepSpeed's decode every rank's
  // pickle; a DCP tag's index is its .metadata and its items' headers, nothing a cache would save.
  bool cached;
};

const std::vector<SourceReader>& source_readers();
// The reader whose tag `dir` is, or nullptr.
const SourceReader* reader_of(const Dir& dir);

}  // namespace zm::ds
