// The one place where source kinds are registered, in the order a folder is asked about them.
#include "zeromount/ds/sources.h"

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/dcp_source.h"

namespace zm::ds {

const std::vector<SourceReader>& source_readers() {
  static const std::vector<SourceReader> all = {
      {"deepspeed", holds_optim_states, index_deepspeed, true},
      {"dcp", is_dcp_tag, [](const std::string& dir, bool) { return index_dcp(dir); }, false},
  };
  return all;
}

const SourceReader* reader_of(const Dir& dir) {
  for (const SourceReader& r : source_readers())
    if (r.is_tag(dir)) return &r;
  return nullptr;
}

}  // namespace zm::ds
