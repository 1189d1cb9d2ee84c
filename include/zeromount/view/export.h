#pragma once
// `zeromount export`: the made-up folders of a view written to a real folder, for machines where
// FUSE is not available. Same VirtualFiles as the mount; bounded memory; all or nothing.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zeromount/view/view.h"

namespace zm::view {

struct ExportOptions {
  std::string what = "universal";  // a Provider::kind(), or "all"
  // With a kind: export only this entry of its top-level folder, looked up by name (e.g. the
  // layout zero3-dp64-bf16 of layouts/, which a listing need not show). `out` becomes that entry.
  std::string below;
  unsigned threads = 2;
  size_t chunk = 4u << 20;                                      // per-thread buffer: memory is threads x chunk
  std::function<void(uint64_t done, uint64_t total)> progress;  // called from the workers
  bool crcs = true;  // real CRC-32s in exported .pt files (written once, so they can afford them)
  // Set (from a signal handler) to stop: the export then removes its temporary folder and throws.
  const std::atomic<bool>* cancel = nullptr;
};

struct ExportResult {
  uint64_t files = 0, bytes = 0;
};

// Temporary folders of exports that died (kill -9, power loss) are removed on the next export to
// the same place. Files that are one whole real file under several names (the model-state aliases) are written
// once and hard-linked. Writes into a temporary folder beside `out` and renames it to `out` at the end; on any failure
// the temporary folder is removed and nothing is left. `out` must not exist.
ExportResult export_view(const View& v, const std::string& out, const ExportOptions& opts);

}  // namespace zm::view
