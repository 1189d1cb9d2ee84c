#pragma once
// The subcommands, free of CLI11 (which costs ~14 s per file to compile: main.cpp only).
#include <string>
#include <vector>

#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/view.h"

namespace zm::cli {

// A command line that cannot work as given (exit status 2), as opposed to a failure while running (1).
class UsageError : public Error {
 public:
  explicit UsageError(std::string msg) : Error(std::move(msg), EINVAL) {}
};

// The target `name` stands for; `option` ("--layout", "-o layouts") names where it was given.
// Throws UsageError with the grammar for any other spelling.
ds::TargetLayout layout_named(const std::string& option, const std::string& name);
// Any name layouts/ serves: a ZeRO target (layout_named) or a torch layout (fsdp-dp<W>, torch).
void check_layout_name(const std::string& option, const std::string& name);

// With `layout`: the partition table of that target (layout_table.cpp) instead of the index summary;
// for a torch layout (fsdp-dp<W>, torch), the files of layouts/<layout> with their sizes.
int inspect(const std::string& ckpt, const std::string& tag, bool json, const std::string& layout = {});
// inspect --html OUT: the report page a mount of `ckpt` shows, written to `out`: tag `tag`'s
// (<T>_params/report.html; "checkpoint-2/global_step2" for a tag in a folder below), or without
// `tag` the page across the tags of `ckpt` (report.html: its own, or its checkpoint folders').
int inspect_html(const std::string& ckpt, const std::string& tag, const std::string& out);
std::string layout_table(const ds::TagIndex& index, const ds::TargetLayout& target);
std::string layout_json(const ds::TagIndex& index, const ds::TargetLayout& target);  // docs/inspect-json.md
int dump(const std::string& file, bool json);
// Writes the made-up folders (universal, fp32, params or all) to a new real folder.
// With `layout`, writes layouts/<layout> as the load_dir `out`.
int export_view(const std::string& source, const std::string& out, const std::string& what, unsigned threads,
                const std::string& layout = {});

// verify: prints the report (text or JSON), writes `html` when given; returns 0, 1 (warnings) or 2
// (failures). An input that cannot be read at all throws (exit 2 in main).
int verify(const std::string& path, const std::string& tag, bool json, const std::string& html);
struct DiffArgs {
  std::string tag_a, tag_b;
  double atol = 0, rtol = 0;
};
// diff: 0 when every compared item is equal or within tolerance, 1 otherwise.
int diff(const std::string& a, const std::string& b, const DiffArgs& d, bool json, const std::string& html);

// The rescan period on a network filesystem or object-storage client, unless -o rescan=S is given.
constexpr double kNetworkRescanSeconds = 60;
// How long a read of a network source may wait below before the request fails with EIO, unless
// -o source_timeout=S is given: under the 30 s a reader should wait for an answer (issue 40), above
// what a range request of a live backend takes.
constexpr double kNetworkSourceTimeout = 20;
// FUSE worker threads on a network source, unless --threads is given (libfuse's default is 10).
constexpr unsigned kNetworkFuseThreads = 64;

struct MountOptions {
  std::string source, mountpoint;
  std::vector<std::string> fuse_opts;  // -o a,b,c split
  bool foreground = false;
  bool debug = false;
  std::string log_level = "info";
  std::string log_file;             // where the daemon logs once detached; "" = syslog
  unsigned threads = 0;             // 0: libfuse's default
  std::vector<std::string> tags;    // --tag: serve only these
  bool tp_no_strict = false;        // ds_to_universal.py --no_strict: unused TP patterns are not refused
  bool bare_zero3_tensors = false;  // stage-3 param files as bare tensors (DeepSpeed < 0.19.3)
  unsigned read_ahead_kb = view::kRequestBytes / 1024;  // one request ahead; 0: leave the kernel's 128 KiB
  std::vector<std::string> layout_presets;              // -o layouts=a,b (not passed to libfuse)
  std::string layouts_dir = "layouts";                  // -o layouts_dir=NAME
  double rescan_seconds = 1.0;                          // -o rescan=S: new tags at most this often; 0: never
  bool rescan_given = false;                            // -o rescan=S was given (else a network SRC gets 60)
  double source_timeout_seconds = -1;        // -o source_timeout=S; unset: kNetworkSourceTimeout on a network SRC
  bool crc = false;                          // -o crc: real CRC-32s in made-up .pt files
  uint64_t max_shard_bytes = 5'000'000'000;  // -o max_shard_size: consolidated weights' shards
  bool report = true;                        // -o report=off: no report pages
  bool weights_saved_names = true;           // -o weights_names=saved|runtime
  uint64_t cache_bytes = 16u << 20;          // -o cache=BYTES: built files' headers kept
};
int mount(const MountOptions& opts);

}  // namespace zm::cli
