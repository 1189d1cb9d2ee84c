#pragma once
// Work on a network source, answered by a deadline (issue 40). An object-storage client whose
// backend went away retries below us for tens of seconds (rclone with one retry: 48 s), and a FUSE
// request that waits that long holds one of the daemon's few worker threads: `ls` of the mount and
// .zeromount/stats stall behind it. So reads and rescans of such a source run on threads of their
// own; the request waits at most a deadline, then answers (EIO for a read, what is already known
// for a listing), while the work below goes on and finishes on its own. Whatever the work needs
// it must own (a buffer, a shared pointer), since its caller may have stopped waiting.
// Memory and threads are bounded: `threads` jobs run at once, and a job its caller stopped
// waiting for before it started is dropped, not run.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zm::view {

class OffPath {
 public:
  explicit OffPath(size_t threads);
  // Waits for the jobs still running: a read the backend never answers ends with the client's own
  // timeout. Jobs not started are dropped.
  ~OffPath();
  OffPath(const OffPath&) = delete;
  OffPath& operator=(const OffPath&) = delete;

  enum class Unwaited {
    Drop,  // not started when the caller stops waiting: never run (a read nobody waits for)
    Keep,  // run anyway, later (a rescan: what it adds is shown to the next request)
  };
  // Runs `work` on a pool thread and waits at most `within`. True when it finished in time (an
  // exception it threw is rethrown here); false when it is still queued or running.
  bool run(std::function<void()> work, std::chrono::milliseconds within, Unwaited unwaited = Unwaited::Drop);
  // Jobs still running whose caller stopped waiting: the source is not answering.
  size_t overdue() const;
  // Callers that stopped waiting, since the start (.zeromount/stats).
  uint64_t timeouts() const;

 private:
  struct Job;
  void work_loop();

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job queued, or stopping
  std::condition_variable done_cv_;  // a job finished
  std::deque<std::shared_ptr<Job>> queue_;
  size_t overdue_ = 0;
  uint64_t timeouts_ = 0;
  bool stopping_ = false;
  const size_t size_;
  std::vector<std::thread> threads_;  // started by the first run(), under mu_
};

}  // namespace zm::view
