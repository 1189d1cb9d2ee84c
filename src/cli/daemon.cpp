#include "daemon.h"
#include "mount_point.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>

namespace zm::cli {

namespace {

pid_t g_server = -1;

void forward(int sig) {
  if (g_server > 0) kill(g_server, sig);
}

// After the daemon detaches from the terminal: a --log-file, else syslog. Without either (a
// container with no /dev/log) lines would be lost, so that is said while stderr still reaches the user.
void log_in_background(const std::string& log_file) {
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (!log_file.empty())
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file);
  else
    sink = std::make_shared<spdlog::sinks::syslog_sink_mt>("zeromount", LOG_PID, LOG_DAEMON, false);
  auto logger = std::make_shared<spdlog::logger>("zeromount", sink);
  logger->set_level(spdlog::default_logger()->level());
  logger->flush_on(spdlog::level::trace);  // the server ends with _exit: nothing may wait in a buffer
  spdlog::set_default_logger(logger);
}

void write_all(int fd, const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const ssize_t n = ::write(fd, s.data() + at, s.size() - at);
    if (n <= 0 && errno != EINTR) return;
    if (n > 0) at += size_t(n);
  }
}

void lazy_unmount(const std::string& mnt) {
  if (umount2(mnt.c_str(), MNT_DETACH) == 0) return;
  const pid_t p = fork();  // not root: the setuid helper may unmount the user's own mounts
  if (p == 0) {
    execlp("fusermount3", "fusermount3", "-u", "-z", "--", mnt.c_str(), (char*)nullptr);
    _exit(127);
  }
  int st;
  if (p > 0) waitpid(p, &st, 0);
}

void detach_stdio() {
  const int null = ::open("/dev/null", O_RDWR);
  dup2(null, 0);
  dup2(null, 1);
  dup2(null, 2);
  if (null > 2) close(null);
}

[[noreturn]] void supervise(const std::string& mountpoint, const Serve& serve, int ready, const std::string& log_file) {
  setsid();
  if (chdir("/") != 0) _exit(1);
  const pid_t server = fork();
  if (server < 0) _exit(1);
  if (server == 0) {
    prctl(PR_SET_NAME, "zm-serve");
    // stderr stays the user's terminal until the mount is made, so that libfuse's and
    // fusermount3's own reasons reach them; then the daemon detaches.
    // The log is open before the caller is told: `zeromount --log-file F S M && tail F` finds F.
    const int rc = serve([&](const std::string& err) {
      log_in_background(log_file);
      write_all(ready, err.empty() ? "m" : "e" + err);
      close(ready);
      detach_stdio();
    });
    _exit(rc);
  }
  close(ready);
  detach_stdio();
  log_in_background(log_file);
  g_server = server;
  struct sigaction sa {};
  sa.sa_handler = forward;  // `kill <supervisor>` unmounts cleanly through the server
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  int status = 0;
  while (waitpid(server, &status, 0) < 0 && errno == EINTR) {
  }
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!clean && is_mounted(mountpoint)) {
    spdlog::error("server for {} died ({} {}); unmounting lazily", mountpoint,
                  WIFSIGNALED(status) ? "signal" : "exit status",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    lazy_unmount(mountpoint);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

}  // namespace

int run_in_background(const std::string& mountpoint, const Serve& serve, const std::string& log_file_given) {
  // The daemon changes to "/": a relative --log-file is the caller's, so resolve it now.
  const std::string log_file =
      log_file_given.empty() ? "" : std::filesystem::absolute(log_file_given).lexically_normal().string();
  if (log_file.empty() && ::access("/dev/log", W_OK) != 0)
    spdlog::warn("no /dev/log here (a container?): the daemon's log is lost; pass --log-file PATH to keep it");
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    std::cerr << "zeromount: pipe: " << strerror(errno) << "\n";
    return 1;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    std::cerr << "zeromount: fork: " << strerror(errno) << "\n";
    return 1;
  }
  if (pid == 0) {
    close(ready[0]);
    supervise(mountpoint, serve, ready[1], log_file);
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
    std::cerr << "zeromount: " << (msg.size() > 1 ? msg.substr(1) : "the server died before mounting") << "\n";
    return 1;
  }
  // Return only once the mount answers: this stat waits for the server's first reply.
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    const int e = errno;
    std::cerr << "zeromount: " << mountpoint << " does not answer: " << strerror(e) << "; unmounting\n";
    kill(pid, SIGTERM);  // the supervisor forwards it; leave no mount and no process behind
    lazy_unmount(mountpoint);
    return 1;
  }
  return 0;
}

}  // namespace zm::cli
