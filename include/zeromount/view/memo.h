#pragma once
// Values computed on demand and kept, a few: the report pages' figures (by the tags' identity), a
// layouts/ folder's partition plans (by tag and target) and the DCP folders' plans, the plans bounded
// by bytes.
#include <atomic>
#include <cstdint>
#include <exception>
#include <future>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace zm::view {

// What the values kept by some Memos weigh together, for .zeromount/stats; evicted_in_use: values
// dropped while still being made or held by a reader (they live on until those let go).
struct MemoWeight {
  std::atomic<uint64_t> bytes{0}, entries{0}, evicted_in_use{0};
  // Plans made while their thread held a tree's exclusive lock: 0 while LazyDir::prepare makes
  // them first (a plan made there would stall every lookup and listing of the mount).
  std::atomic<uint64_t> made_under_tree_lock{0};
};
// What a plan may keep, all its kind's plans together (eight layout
// targets of a 20,000-parameter source fit in 64 MiB).
constexpr uint64_t kPlanBudget = uint64_t(64) << 20;

// A vector's weight by what it holds allocated.
template <typename T>
uint64_t kept_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// The partition plans of layouts/ and the DCP folders, process-wide.
inline MemoWeight& plan_weight() {
  static MemoWeight w;
  return w;
}

// Values by key, computed once however many threads ask at the same time; the `Keep` most
// recently used are kept, and with a budget (bytes, given with a weight function) no more than
// that weight: a value's weight is taken when it is made, and the least recently used values go
// until the rest fit (the newest is always kept: one value larger than the budget is made and
// served, then replaced; a budget of 0 keeps only the newest). A computation that fails is not
// kept: the next reader tries again. A Memo has one owner (the View, or the folder that uses it),
// which outlives every key it holds.
template <typename Key, typename V, size_t Keep>
class Memo {
 public:
  using Weigh = uint64_t (*)(const V&);
  explicit Memo(MemoWeight* weight = nullptr) : weight_(weight) {}
  Memo(uint64_t budget, Weigh weigh, MemoWeight* weight = nullptr)
      : weight_(weight), budget_(budget), bounded_(true), weigh_(weigh) {}
  ~Memo() {
    if (weight_) account(-int64_t(bytes_), -int64_t(kept_.size()));
  }
  Memo(const Memo&) = delete;
  Memo& operator=(const Memo&) = delete;

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
    kept_.push_front(Entry{key, made.get_future().share(), mine, 0});
    at_[key] = kept_.begin();
    account(0, 1);
    evict();
    auto wait = kept_.front().value;
    lock.unlock();
    try {
      std::shared_ptr<const V> value = compute();
      const uint64_t w = weigh(value);
      made.set_value(std::move(value));
      lock.lock();
      if (auto it = at_.find(key); it != at_.end() && it->second->id == mine) {
        it->second->made = true;
        it->second->bytes = w;
        bytes_ += w;
        account(int64_t(w), 0);
        evict();
      }
    } catch (...) {
      made.set_exception(std::current_exception());
      if (!lock.owns_lock()) lock.lock();
      if (auto it = at_.find(key); it != at_.end() && it->second->id == mine) drop(it->second);
    }
    return wait.get();
  }

  uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_.size();
  }
  // Values evicted while still being made or held by a reader: what a concurrency test must see
  // happen, and survive.
  uint64_t evicted_in_use() const {
    std::lock_guard<std::mutex> lock(mu_);
    return evicted_in_use_;
  }

 private:
  struct Entry {
    Key key;
    std::shared_future<std::shared_ptr<const V>> value;
    uint64_t id;
    uint64_t bytes;     // 0 until made
    bool made = false;  // the value is set (a failure is never made)
  };
  using Iter = typename std::list<Entry>::iterator;

  uint64_t weigh(const std::shared_ptr<const V>& v) const {
    if (!v) return 0;
    return weigh_ ? weigh_(*v) : 0;
  }
  void account(int64_t bytes, int64_t entries) {
    if (!weight_) return;
    weight_->bytes.fetch_add(uint64_t(bytes), std::memory_order_relaxed);
    weight_->entries.fetch_add(uint64_t(entries), std::memory_order_relaxed);
  }
  void drop(Iter it) {
    bytes_ -= it->bytes;
    account(-int64_t(it->bytes), -1);
    at_.erase(it->key);
    kept_.erase(it);
  }
  // Readers waiting on a dropped value still get it: they hold its future (and then the value).
  void evict() {
    while (kept_.size() > Keep || (bounded_ && bytes_ > budget_ && kept_.size() > 1)) {
      const Iter last = std::prev(kept_.end());
      // The future holds one reference: any other is a reader's.
      if (!last->made || last->value.get().use_count() > 1) {
        ++evicted_in_use_;
        if (weight_) weight_->evicted_in_use.fetch_add(1, std::memory_order_relaxed);
      }
      drop(last);
    }
  }

  mutable std::mutex mu_;  // a leaf (lock order: src/view/core/checkpoint_folder.h)
  std::list<Entry> kept_;  // most recently used first
  std::map<Key, Iter> at_;
  uint64_t made_ = 0;
  uint64_t bytes_ = 0;
  uint64_t evicted_in_use_ = 0;
  MemoWeight* weight_;
  uint64_t budget_ = 0;
  bool bounded_ = false;
  Weigh weigh_ = nullptr;
};

}  // namespace zm::view
