#pragma once
// The one worker pool: the report pages' passes and export's copies run f(k) for k in [0, n) on a
// few threads, the calling thread one of them.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace zm::view {

// The first exception a call throws stops the others (no new k is taken) and is rethrown here once
// all have returned. jthreads join when destroyed: a thread that cannot be started (EAGAIN) leaves
// the others to finish and its std::system_error reaches the caller, instead of ending the process
// as a joinable std::thread destroyed by the unwinding would.
template <typename F>
void parallel_for(size_t n, size_t workers, F f) {
  workers = std::clamp<size_t>(workers, 1, std::max<size_t>(n, 1));
  std::atomic<size_t> next{0};
  std::exception_ptr failed;
  std::mutex mu;
  auto work = [&] {
    try {
      for (size_t k; (k = next.fetch_add(1)) < n;) f(k);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed) failed = std::current_exception();
      next = n;
    }
  };
  {
    std::vector<std::jthread> threads;
    for (size_t w = 1; w < workers; ++w) threads.emplace_back(work);
    work();
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace zm::view
