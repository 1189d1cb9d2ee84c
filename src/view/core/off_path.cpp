#include "zeromount/view/off_path.h"

#include <algorithm>
#include <exception>

namespace zm::view {

struct OffPath::Job {
  std::function<void()> work;
  std::exception_ptr error;
  enum class State { Queued, Running, Done } state = State::Queued;
  bool unwaited = false;  // its caller stopped waiting while it ran
};

OffPath::OffPath(size_t threads) : size_(std::max<size_t>(threads, 1)) {}

OffPath::~OffPath() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool OffPath::run(std::function<void()> work, std::chrono::milliseconds within, Unwaited unwaited) {
  auto job = std::make_shared<Job>();
  job->work = std::move(work);
  std::unique_lock<std::mutex> lock(mu_);
  // Started at the first job: a pool that never gets one (a mount nobody reads) holds no threads.
  // (View::start_serving makes the View's pools after the daemon's fork, which threads do not cross.)
  if (threads_.empty())
    for (size_t k = 0; k < size_; ++k) threads_.emplace_back([this] { work_loop(); });
  queue_.push_back(job);
  work_cv_.notify_one();
  if (!done_cv_.wait_for(lock, within, [&] { return job->state == Job::State::Done; })) {
    ++timeouts_;
    if (job->state == Job::State::Running) {
      job->unwaited = true;
      ++overdue_;
    } else if (unwaited == Unwaited::Drop) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), job));
    }
    return false;
  }
  if (job->error) std::rethrow_exception(job->error);
  return true;
}

void OffPath::work_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_ && queue_.empty()) return;
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    job->state = Job::State::Running;
    lock.unlock();
    try {
      job->work();
    } catch (...) {
      job->error = std::current_exception();
    }
    job->work = nullptr;  // what it owned goes now, not with the last reference
    lock.lock();
    job->state = Job::State::Done;
    if (job->unwaited) --overdue_;
    done_cv_.notify_all();
  }
}

size_t OffPath::overdue() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overdue_;
}

uint64_t OffPath::timeouts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeouts_;
}

}  // namespace zm::view
