#pragma once
// Values computed on demand and kept, a few: the report pages' figures (by the tags' identity) and
// a layouts/ folder's partition plans (by tag and target).
#include <cstdint>
#include <exception>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>

namespace zm::view {

// Values by key, computed once however many threads ask at the same time; the `Keep` most
// recently used are kept. A computation that fails is not kept: the next reader tries again.
template <typename Key, typename V, size_t Keep>
class Memo {
 public:
  template <typename F>
  std::shared_ptr<const V> get(const Key& key, F compute) {
    std::unique_lock<std::mutex> lock(mu_);
    if (auto it = at_.find(key); it != at_.end()) {
      kept_.splice(kept_.begin(), kept_, it->second);
      auto wait = it->second->value;
      lock.unlock();
      return wait.get();
    }
    std::promise<std::shared_ptr<const V>> made;
    const uint64_t mine = ++made_;
    kept_.push_front(Entry{key, made.get_future().share(), mine});
    at_[key] = kept_.begin();
    while (kept_.size() > Keep) {
      at_.erase(kept_.back().key);
      kept_.pop_back();
    }
    auto wait = kept_.front().value;
    lock.unlock();
    try {
      made.set_value(compute());
    } catch (...) {
      made.set_exception(std::current_exception());
      lock.lock();
      if (auto it = at_.find(key); it != at_.end() && it->second->id == mine) {
        kept_.erase(it->second);
        at_.erase(it);
      }
    }
    return wait.get();
  }

 private:
  struct Entry {
    Key key;
    std::shared_future<std::shared_ptr<const V>> value;
    uint64_t id;
  };
  std::mutex mu_;
  std::list<Entry> kept_;  // most recently used first
  std::map<Key, typename std::list<Entry>::iterator> at_;
  uint64_t made_ = 0;
};

}  // namespace zm::view
