#include "commands.h"

#include <fcntl.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/inspect.h"
#include "zeromount/fuse/adapter.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"

namespace zm::cli {

namespace fs = std::filesystem;

int inspect(const std::string& ckpt, const std::string& tag, bool json) {
  const ds::CheckpointDir dir = ds::scan_checkpoint(ckpt);
  std::string tag_dir;
  if (dir.root_is_tag && tag.empty()) {
    tag_dir = dir.root;
  } else {
    std::string t = tag.empty() ? dir.latest.value_or(dir.tags.empty() ? "" : dir.tags.back()) : tag;
    if (t.empty()) throw Error(ckpt + ": no tag folder with *_optim_states.pt files and no 'latest'", ENOENT);
    tag_dir = (fs::path(dir.root) / t).string();
  }
  auto index = ds::index_tag(tag_dir);
  std::cout << (json ? ds::inspect_json(*index) : ds::inspect_text(*index));
  return 0;
}

int dump(const std::string& file, bool json) {
  auto pt = pt::load_pt(file);
  std::cout << (json ? pt::dump_json(*pt) + "\n" : pt::dump_tree(*pt));
  return 0;
}

}  // namespace zm::cli

namespace zm::cli {

namespace {

void raise_fd_limit() {
  // Every shard stays open for the mount's lifetime; checkpoints with many ranks exceed 1024.
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

void log_to_syslog() {
  auto logger = std::make_shared<spdlog::logger>("zeromount", std::make_shared<spdlog::sinks::syslog_sink_mt>("zeromount", LOG_PID, LOG_DAEMON, false));
  logger->set_level(spdlog::default_logger()->level());
  spdlog::set_default_logger(logger);
}

void write_all(int fd, const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const ssize_t n = ::write(fd, s.data() + at, s.size() - at);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) at += size_t(n);
  }
}

}  // namespace

int mount(const MountOptions& o) {
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  raise_fd_limit();
  std::error_code ec;
  const std::string mountpoint = fs::canonical(o.mountpoint, ec).string();
  if (ec) throw Error(o.mountpoint + ": mount point " + ec.message(), ENOENT);
  // Index before forking: a checkpoint that cannot be served is refused here, in the caller's terminal.
  view::ViewOptions vo;
  vo.bare_zero3_tensors = o.bare_zero3_tensors;
  auto view = view::View::open(o.source, vo);
  const auto& s = view->stats();
  fuse::MountConfig cfg;
  cfg.mountpoint = mountpoint;
  cfg.fsname = "zeromount:" + fs::canonical(o.source).string();
  for (char& c : cfg.fsname)
    if (c == ',') c = '_';  // a comma would end the -o value
  cfg.options = o.fuse_opts;
  cfg.threads = o.threads;
  cfg.debug = o.debug;
  const std::string summary = fmt::format(
      "mounted {} on {}: {} tag(s), {} params, {} files, {} shards, {} of optimizer state; indexed in {:.3f} s",
      o.source, mountpoint, s.tags, s.params, s.files, s.shards, ds::human_bytes(s.state_bytes), s.index_seconds);

  if (o.foreground || o.debug) {
    return fuse::serve(*view, cfg, [&](const std::string& err) {
      if (err.empty()) spdlog::info("{}", summary);
      else spdlog::error("{}", err);
    });
  }
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) throw Error("pipe failed", errno);
  const pid_t pid = fork();
  if (pid < 0) throw Error("fork failed", errno);
  if (pid == 0) {
    close(ready[0]);
    setsid();
    if (chdir("/") != 0) _exit(1);
    const int null = ::open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    log_to_syslog();
    const int rc = fuse::serve(*view, cfg, [&](const std::string& err) {
      if (err.empty()) spdlog::info("{}", summary);
      write_all(ready[1], err.empty() ? "m" : "e" + err);
      close(ready[1]);
    });
    _exit(rc);
  }
  close(ready[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(ready[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    msg.append(buf, size_t(n));
  }
  close(ready[0]);
  if (msg != "m") {
    std::cerr << "zeromount: " << (msg.size() > 1 ? msg.substr(1) : "the mount process died before mounting") << "\n";
    return 1;
  }
  // Return only once the mount answers: this stat waits for the daemon's first reply.
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    std::cerr << "zeromount: " << mountpoint << " does not answer: " << strerror(errno) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace zm::cli
