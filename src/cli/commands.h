#pragma once
// The subcommands, free of CLI11 (which costs ~14 s per file to compile: main.cpp only).
#include <string>
#include <vector>

#include "zeromount/view/view.h"

namespace zm::cli {

int inspect(const std::string& ckpt, const std::string& tag, bool json);
int dump(const std::string& file, bool json);
// Writes the made-up folders (universal, fp32, params or all) to a new real folder.
int export_view(const std::string& source, const std::string& out, const std::string& what, unsigned threads);

struct MountOptions {
  std::string source, mountpoint;
  std::vector<std::string> fuse_opts;  // -o a,b,c split
  bool foreground = false;
  bool debug = false;
  std::string log_level = "info";
  unsigned threads = 0;             // 0: libfuse's default
  bool tp_no_strict = false;        // ds_to_universal.py --no_strict: unused TP patterns are not refused
  bool bare_zero3_tensors = false;  // stage-3 param files as bare tensors (DeepSpeed < 0.19.3)
  unsigned read_ahead_kb = view::kRequestBytes / 1024;  // one request ahead; 0: leave the kernel's 128 KiB
};
int mount(const MountOptions& opts);

}  // namespace zm::cli
