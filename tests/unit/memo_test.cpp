// The plan cache (view/memo.h): bounded by entries and, with a budget, by the bytes its values
// say they keep (issue 29), with .zeromount/stats' sums kept in step.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "zeromount/view/memo.h"

namespace zm {
namespace {

struct Weighed {
  uint64_t size;
  uint64_t bytes() const { return size; }
};

TEST(Memo, KeepsTheMostRecentlyUsedWithinItsByteBudget) {
  view::MemoWeight weight;
  {
    view::Memo<int, Weighed, 8> memo(
        100, [](const Weighed& w) { return w.bytes(); }, &weight);
    int made = 0;
    auto get = [&](int k, uint64_t size) {
      return memo.get(k, [&] {
        ++made;
        return std::make_shared<const Weighed>(Weighed{size});
      });
    };
    get(1, 40);
    get(2, 40);
    EXPECT_EQ(memo.bytes(), 80u);
    get(1, 40);  // used again: 2 is now the least recently used
    get(3, 40);  // 120 > 100: 2 goes
    EXPECT_EQ(memo.size(), 2u);
    EXPECT_EQ(memo.bytes(), 80u);
    EXPECT_EQ(weight.bytes.load(), 80u);
    EXPECT_EQ(weight.entries.load(), 2u);
    EXPECT_EQ(made, 3);
    get(1, 40);
    EXPECT_EQ(made, 3) << "1 was kept";
    get(2, 40);
    EXPECT_EQ(made, 4) << "2 was dropped and is made again";
    // One value larger than the whole budget is served and kept alone, until the next one.
    auto big = get(4, 500);
    EXPECT_EQ(big->size, 500u);
    EXPECT_EQ(memo.size(), 1u);
    EXPECT_EQ(weight.bytes.load(), 500u);
  }
  EXPECT_EQ(weight.bytes.load(), 0u) << "a cache that goes gives back its weight";
  EXPECT_EQ(weight.entries.load(), 0u);
}

TEST(Memo, KeepsAtMostKeepEntriesAndForgetsFailures) {
  view::Memo<std::string, Weighed, 2> memo;
  for (const char* k : {"a", "b", "c"}) memo.get(k, [] { return std::make_shared<const Weighed>(Weighed{1}); });
  EXPECT_EQ(memo.size(), 2u);
  EXPECT_EQ(memo.bytes(), 0u) << "no budget: nothing is weighed";
  EXPECT_THROW(memo.get("x", []() -> std::shared_ptr<const Weighed> { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(memo.size(), 1u) << "a failed computation is not kept (while it ran, it took the oldest one's place)";
  EXPECT_EQ(memo.get("x", [] { return std::make_shared<const Weighed>(Weighed{7}); })->size, 7u);
}

// View::content's form: a budget given at run time and a weight function; threads reading one
// file at once wait for one build.
TEST(Memo, ARunTimeBudgetWeighsByItsFunctionAndOneBuildServesEveryReader) {
  view::Memo<int, Weighed, std::numeric_limits<size_t>::max()> memo(100, [](const Weighed& w) { return 2 * w.size; });
  std::atomic<int> made{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t)
    readers.emplace_back([&] {
      while (!go) std::this_thread::yield();
      memo.get(1, [&] {
        ++made;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return std::make_shared<const Weighed>(Weighed{20});
      });
    });
  go = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(memo.bytes(), 40u) << "weighed by the function given";
  memo.get(2, [] { return std::make_shared<const Weighed>(Weighed{20}); });
  memo.get(3, [] { return std::make_shared<const Weighed>(Weighed{20}); });  // 120 > 100: 1 goes
  EXPECT_EQ(memo.size(), 2u);
  EXPECT_EQ(memo.bytes(), 80u);
}

// Issue 44: a run-time budget of 0 keeps the newest value only (it used to mean no budget at all),
// and the Memo counts the values it evicts while they are still made or held: the storm of
// stress_test.cpp must see that happen.
TEST(Memo, ABudgetOfZeroKeepsTheNewestAndCountsEvictionsOfValuesInUse) {
  view::MemoWeight weight;
  view::Memo<int, Weighed, std::numeric_limits<size_t>::max()> memo(
      0, [](const Weighed& w) { return w.size; }, &weight);
  auto make = [](uint64_t size) { return [size] { return std::make_shared<const Weighed>(Weighed{size}); }; };
  auto held = memo.get(1, make(10));
  memo.get(2, make(10));
  EXPECT_EQ(memo.size(), 1u) << "only the newest is kept";
  EXPECT_EQ(memo.evicted_in_use(), 1u) << "1 went while held";
  memo.get(3, make(10));
  EXPECT_EQ(memo.evicted_in_use(), 1u) << "nobody held 2";
  EXPECT_EQ(held->size, 10u) << "a holder keeps what it holds";

  // A value still being made, evicted: its maker and its waiters still get it.
  std::atomic<bool> started{false}, release{false};
  std::thread maker([&] {
    auto v = memo.get(4, [&] {
      started = true;
      while (!release) std::this_thread::yield();
      return std::make_shared<const Weighed>(Weighed{7});
    });
    EXPECT_EQ(v->size, 7u);
  });
  while (!started) std::this_thread::yield();
  memo.get(5, make(10));  // once 5 weighs something, 4 (still being made) goes
  EXPECT_EQ(memo.evicted_in_use(), 2u);
  EXPECT_EQ(weight.evicted_in_use.load(), 2u);
  release = true;
  maker.join();
}

}  // namespace
}  // namespace zm
