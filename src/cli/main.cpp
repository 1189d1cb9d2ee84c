// zeromount: mount a DeepSpeed ZeRO checkpoint as a read-only view with universal checkpoints
// built lazily, or inspect one. Only argument parsing lives here.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "zeromount/check/numbers.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/files/weights.h"
#include "zeromount/view/provider.h"

namespace {

std::vector<std::string> split_opts(const std::vector<std::string>& raw) {
  std::vector<std::string> out;
  for (const auto& r : raw) {
    std::stringstream ss(r);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(item);
  }
  return out;
}

// -o layouts=a,b, layouts_dir=NAME, rescan=S, source_timeout=S, max_shard_size=N, weights_names=W, cache=BYTES,
// report=off and crc are zeromount's, not libfuse's. The comma that splits -o values also splits the preset list, so
// the items after layouts= that are layout names (which no libfuse option is) belong to it. NAME=S, a number of seconds
// from 0 to a day.
double seconds_option(const std::string& o) {
  const size_t eq = o.find('=');
  char* end = nullptr;
  const double s = std::strtod(o.c_str() + eq + 1, &end);
  if (eq + 1 == o.size() || *end || !(s >= 0) || s > 86400)
    throw zm::cli::UsageError("-o " + o.substr(0, eq) + ": '" + o.substr(eq + 1) +
                              "' is not a number of seconds (0 to 86400)");
  return s;
}

std::vector<std::string> take_own_opts(const std::vector<std::string>& opts, zm::cli::MountOptions& m) {
  using zm::cli::UsageError;
  std::vector<std::string> rest;
  bool in_list = false;
  for (const auto& o : opts) {
    if (o == "rw") {
      throw UsageError("-o rw: the view is read-only (every write gets EROFS); mount without rw");
    } else if (o == "crc") {
      in_list = false;
      m.crc = true;
    } else if (o.starts_with("report=")) {
      in_list = false;
      if (o != "report=on" && o != "report=off") throw UsageError("-o report: '" + o.substr(7) + "' is not on or off");
      m.report = o == "report=on";
    } else if (o.starts_with("weights_names=")) {
      in_list = false;
      if (o != "weights_names=saved" && o != "weights_names=runtime")
        throw UsageError("-o weights_names: '" + o.substr(14) + "' is not saved or runtime");
      m.weights_saved_names = o == "weights_names=saved";
    } else if (o.starts_with("rescan=")) {
      in_list = false;
      m.rescan_seconds = seconds_option(o);
      m.rescan_given = true;
    } else if (o.starts_with("source_timeout=")) {
      in_list = false;
      m.source_timeout_seconds = seconds_option(o);
    } else if (o.starts_with("max_shard_size=")) {
      in_list = false;
      try {
        m.max_shard_bytes = zm::view::parse_shard_size(o.substr(15));
      } catch (const zm::Error& e) {
        throw UsageError(e.what());
      }
    } else if (o.starts_with("cache=")) {
      in_list = false;
      const std::string n = o.substr(6);
      errno = 0;
      char* end = nullptr;
      m.cache_bytes = std::strtoull(n.c_str(), &end, 10);
      if (n.empty() || *end || errno || n.find_first_not_of("0123456789") != std::string::npos)
        throw UsageError("-o cache: '" + n + "' is not a number of bytes");
    } else if (o.starts_with("layouts=")) {
      in_list = true;
      if (o.size() > 8)
        m.layout_presets.push_back(zm::ds::target_name(zm::cli::layout_named("-o layouts", o.substr(8))));
    } else if (o.starts_with("layouts_dir=")) {
      in_list = false;
      m.layouts_dir = o.substr(12);
      if (m.layouts_dir.empty() || m.layouts_dir.find('/') != std::string::npos || m.layouts_dir == "." ||
          m.layouts_dir == "..")
        throw UsageError("-o layouts_dir: '" + m.layouts_dir + "' is not a file name");
      // Names the view makes up in a checkpoint folder: the layouts would be lost under them.
      for (const char* made : {"report.html", ".zeromount", "latest_universal"})
        if (m.layouts_dir == made)
          throw UsageError("-o layouts_dir: '" + m.layouts_dir + "' is a name the view makes up; choose another name");
    } else if (in_list && zm::ds::parse_target(o)) {
      m.layout_presets.push_back(o);
    } else {
      in_list = false;
      rest.push_back(o);
    }
  }
  return rest;
}

}  // namespace

int main(int argc, char** argv) {
  // Log lines are for the terminal's stderr (stdout carries inspect's and dump's output) until a
  // mount's daemon detaches.
  spdlog::set_default_logger(spdlog::stderr_color_mt("zeromount"));
  CLI::App app{
      "zeromount: a read-only FUSE view of DeepSpeed ZeRO checkpoints, with universal "
      "checkpoints built lazily from the shards"};
  app.set_version_flag("--version", "zeromount " ZM_VERSION);
  zm::cli::MountOptions m;
  std::vector<std::string> raw_opts;
  app.add_option("source", m.source, "checkpoint folder (holds 'latest' and tag folders, or is a tag)");
  app.add_option("mountpoint", m.mountpoint, "where to mount the view");
  app.add_option(
         "-o", raw_opts,
         "mount options (comma separated): zeromount's layouts=a,b layouts_dir=NAME rescan=S source_timeout=S (a "
         "network source's reads fail with EIO past it, default 20) "
         "max_shard_size=SIZE (weights folders' shards, default 5GB) weights_names=saved|runtime (weights folders' "
         "tensor names: as save_pretrained writes them, the default, or as the run had them) cache=BYTES (built "
         "files' headers kept, default 16 MiB) crc report=off (no report pages); libfuse's "
         "allow_other, ...")
      ->allow_extra_args(false);
  app.add_flag("-f,--foreground", m.foreground, "stay in the foreground");
  app.add_flag("-d,--debug", m.debug, "libfuse debug output (implies -f)");
  app.add_option("--log-level", m.log_level, "trace, debug, info, warn, error, critical or off")
      ->transform(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--log-file", m.log_file, "the daemon's log once it is in the background (default: syslog)");
  app.add_option("--threads", m.threads, "FUSE worker threads (default: libfuse's)");
  app.add_option("--read-ahead-kb", m.read_ahead_kb, "mount readahead in KiB (root only; 0 leaves 128)")
      ->capture_default_str();
  // One value per --tag: a list option would swallow SRC and MNT after it.
  app.add_option("--tag", m.tags, "serve only this tag (repeatable); it must index, or the mount is refused")
      ->allow_extra_args(false);
  app.add_flag("--tp-no-strict", m.tp_no_strict,
               "like ds_to_universal.py --no_strict: do not refuse universal_checkpoint_info patterns that match no "
               "parameter (e.g. a frozen AutoTP parameter)");
  bool no_index_cache = false;
  app.add_flag("--no-index-cache", no_index_cache,
               "index every tag from its files, neither reading nor writing the index cache (as "
               "ZEROMOUNT_NO_INDEX_CACHE=1)");
  app.add_flag("--bare-zero3-tensors", m.bare_zero3_tensors,
               "write universal param files of ZeRO-3 sources as bare tensors (DeepSpeed < 0.19.3 targets)");

  std::string ckpt, tag, file;
  bool json = false;
  auto* inspect = app.add_subcommand("inspect", "summarise a checkpoint's index (no FUSE needed)");
  inspect->add_option("checkpoint", ckpt, "checkpoint folder or tag folder")->required();
  inspect->add_option("--tag", tag, "tag to index (default: the one in 'latest')");
  inspect->add_flag("--json", json, "stable JSON for scripts (docs/inspect-json.md)");
  std::string layout;
  inspect->add_option("--layout", layout, "print the partition table of a faked layout, e.g. zero3-dp64-bf16");
  std::string html_out;
  inspect->add_option("--html", html_out,
                      "write the report page a mount shows: with --tag T, T's (T_params/report.html), else the page "
                      "across the folder's tags (report.html)");
  auto* dump = app.add_subcommand("dump", "print the structure of one .pt file");
  dump->add_option("file", file, ".pt file")->required();
  dump->add_flag("--json", json, "JSON manifest with tensor metadata and CRCs");

  std::string out, what = "universal";
  unsigned threads = 2;
  auto* exp = app.add_subcommand("export", "write the made-up folders to a real folder (no FUSE needed)");
  exp->add_option("checkpoint", ckpt, "checkpoint folder or tag folder")->required();
  exp->add_option("out", out, "new folder to create (must not exist)")->required();
  std::string kinds;
  for (const auto& p : zm::view::providers()) kinds += std::string(p->kind()) + ", ";
  exp->add_option("--view", what, "which made-up folders: " + kinds + "or all")->capture_default_str();
  exp->add_option("--threads", threads, "parallel copies")->capture_default_str();
  exp->add_option("--layout", layout, "write layouts/<NAME> (a load_dir), e.g. zero3-dp64-bf16, instead of --view");

  std::string html_file, other;
  auto* verify = app.add_subcommand(
      "verify",
      "check a checkpoint for silent corruption: exit 0 all checks pass, 1 warnings, 2 failures (or a usage error)");
  verify
      ->add_option("path", ckpt,
                   "a DeepSpeed checkpoint or tag folder, a DCP folder, a safetensors file or folder, a universal "
                   "folder, or any folder or .pt file (a folder of the mount too)")
      ->required();
  verify->add_option("--tag", tag, "DeepSpeed tag to verify (default: the one in 'latest')");
  verify->add_flag("--json", json, "JSON report on stdout");
  verify->add_option("--html", html_file, "also write the report as an HTML page to this file");
  verify->footer(std::string("Checks: files-open zip-crc safetensors-layout safetensors-index dcp-chunks ds-index "
                             "ds-fragments latest finite exp_avg_sq-nonnegative moments-not-reset step-agrees "
                             "module-matches-masters norm-outlier.\n") +
                 zm::check::kNormRule);
  zm::cli::DiffArgs d;
  auto* dif = app.add_subcommand("diff",
                                 "compare two checkpoints of any formats, parameter by parameter and state by "
                                 "state: exit 0 same, 1 different, 2 a usage error or an unreadable input");
  dif->add_option("a", ckpt, "first checkpoint (any input verify takes)")->required();
  dif->add_option("b", other, "second checkpoint")->required();
  dif->add_option("--tag", d.tag_a, "DeepSpeed tag of A (default: the one in 'latest')");
  dif->add_option("--tag-b", d.tag_b, "DeepSpeed tag of B (default: --tag if given, else B's 'latest')");
  dif->add_option("--atol", d.atol, "absolute tolerance (numpy.allclose: |a-b| <= atol + rtol*|b|)")
      ->capture_default_str();
  dif->add_option("--rtol", d.rtol, "relative tolerance")->capture_default_str();
  dif->add_flag("--json", json, "JSON on stdout");
  dif->add_option("--html", html_file, "also write an HTML page to this file");

  // Exit codes as sshfs has them: 0, 1 for a failure, 2 for a usage error.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (no_index_cache) setenv("ZEROMOUNT_NO_INDEX_CACHE", "1", 1);  // read by ds::index_cache_dir, in this process
  try {
    if (*inspect && !html_out.empty() && (json || !layout.empty()))
      throw zm::cli::UsageError("inspect: --html writes a page; --json and --layout print the index instead");
    if (*inspect && !html_out.empty()) return zm::cli::inspect_html(ckpt, tag, html_out);
    if (*inspect) return zm::cli::inspect(ckpt, tag, json, layout);
    if (*dump) return zm::cli::dump(file, json);
    if (*verify) return zm::cli::verify(ckpt, tag, json, html_file);
    if (*dif) {
      if (!dif->count("--tag-b")) d.tag_b = d.tag_a;
      if (!(d.atol >= 0) || !(d.rtol >= 0)) throw zm::cli::UsageError("diff: --atol and --rtol are numbers >= 0");
      return zm::cli::diff(ckpt, other, d, json, html_file);
    }
    if (*exp && !layout.empty() && exp->count("--view"))
      throw zm::cli::UsageError("export: --layout writes one load_dir, layouts/" + layout +
                                "; --view picks made-up folders instead: give one of them");
    if (*exp) return zm::cli::export_view(ckpt, out, what, threads, layout);
    if (m.source.empty()) {
      std::cerr << app.help();
      return 2;
    }
    if (m.mountpoint.empty())
      throw zm::cli::UsageError("no MOUNTPOINT: zeromount SRC MNT [-o ...] mounts SRC on MNT (zeromount --help)");
    m.fuse_opts = take_own_opts(split_opts(raw_opts), m);
    // The daemon changes to / when it detaches: a relative --log-file means the caller's folder.
    if (!m.log_file.empty()) m.log_file = std::filesystem::absolute(m.log_file).string();
    return zm::cli::mount(m);
  } catch (const zm::cli::UsageError& e) {
    std::cerr << "zeromount: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    // verify and diff keep 1 for "warnings" / "different": an input they cannot read at all is 2.
    std::cerr << "zeromount: " << e.what() << "\n";
    return *verify || *dif ? 2 : 1;
  }
}
