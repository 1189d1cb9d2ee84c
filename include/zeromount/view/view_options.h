#pragma once
// What a mount is asked for (the CLI's -o options and flags), in one place that providers read
// without knowing the View.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zm::view {

struct ViewOptions {
  bool bare_zero3_tensors = false;          // stage-3 sources: param files as bare tensors (DeepSpeed < 0.19.3)
  size_t cache_bytes = 16u << 20;           // built headers kept in memory (0: the newest only); tensor bytes never
  std::vector<std::string> layout_presets;  // -o layouts=a,b: targets listed in layouts/ [layouts §6]
  std::string layouts_dir = "layouts";      // -o layouts_dir=NAME: where the faked layouts live
  std::vector<std::string> tags;            // --tag: serve only these (each must index); empty: every tag
  bool tp_strict = true;  // refuse unused universal_checkpoint_info patterns (ds_to_universal --no_strict: false)
  // -o rescan=S: at most this often, a lookup or listing that may concern a new tag rescans the
  // source for tags saved after the mount; 0 serves the mount-time tags only.
  double rescan_seconds = 1.0;
  // SRC is on a network filesystem or an object-storage client (the CLI asks ds::network_filesystem),
  // where every look at it is a request to a server: its `latest` is read again at most every rescan
  // period, and a served tag folder deleted is noticed at the next rescan, not at every listing.
  bool network_source = false;
  // -o source_timeout=S (network sources; the CLI's default there is 20 s, 0 waits as long as the
  // source does): a read of SRC not answered in S seconds fails with EIO naming the shard, while the
  // read below goes on off the request path; rescans there run off it too (OffPath).
  double source_timeout_seconds = 0;
  bool crc = false;  // -o crc: real CRC-32s in made-up .pt files (stat and open then read the tensors)
  // -o report=off: no report pages (<T>_params/report.html, report.html beside tags and in run folders).
  bool report = true;
  // -o max_shard_size: consolidated weights are split into shards of at most this many bytes, as
  // zero_to_fp32.py --max_shard_size (huggingface_hub's rule: decimal units, 5GB by default).
  uint64_t max_shard_bytes = 5'000'000'000;
  // -o weights_names=saved|runtime: <T>_fp32/ and <T>_bf16/ hold the names and shapes save_pretrained
  // writes (transformers 5's conversion table reversed, chosen by config.json), or the run-time ones.
  bool weights_saved_names = true;
  // Where the view is mounted (absolute, as given to the kernel): never listed or looked into,
  // since a request of the daemon to its own mount can wait on itself forever.
  std::string mount_point;
};

}  // namespace zm::view
