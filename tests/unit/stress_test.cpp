// Issue 44: no reader of a made-up file ever sees it half built or already evicted. Sixteen threads
// read random ranges of every made-up file of one View (universal atoms, weights shards, DCP items,
// the rank files of many layouts/ targets) while the built-file cache, bounded by bytes, evicts
// entries that other threads still build or read; every byte is compared with the file as one
// thread built it alone, before the storm. Selected by .ci/run's ThreadSanitizer step (Concurrency).
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/view/memo.h"
#include "zeromount/view/view.h"

#if defined(__SANITIZE_THREAD__)
#define ZM_STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZM_STRESS_TSAN 1
#endif
#endif

namespace zm::test {
namespace {

using view::Inode;
using view::View;

// Two checkpoint folders of one run folder: a ZeRO-2 and a ZeRO-3 bf16 run (both show <T>_bf16).
const std::vector<std::pair<std::string, std::string>> kSources = {{"z2", "z2_ws2_bf16_pg2"},
                                                                   {"z3", "z3_ws2_bf16_pg2"}};
// Looked up in each: more layouts/ targets than the plan cache keeps (8 per kind), so that plans
// are evicted and made again during the storm too; fsdp-dp<W> and torch are DCP plans.
const std::vector<std::string> kTargets = {"zero1-dp3-fp32", "zero1-dp2-bf16", "zero2-dp4-fp32", "zero2-dp3-bf16",
                                           "zero3-dp3-fp32", "zero3-dp4-bf16", "bf16opt-dp2",    "zero3-dp2-fp32-sg200",
                                           "fsdp-dp2",       "fsdp-dp3",       "fsdp-dp4",       "torch"};

// Every non-live file below `dir` inside a made-up folder, by its path in the view.
void made_files(const View& v, const Inode& dir, const std::string& path, bool made, std::set<std::string>& out) {
  for (uint64_t off = 0;;) {
    const auto e = v.dir_entry(dir, off);
    if (!e) break;
    off = e->next;
    if (e->name == "." || e->name == "..") continue;
    const Inode& n = *e->node;
    const std::string p = path + "/" + std::string(e->name);
    const bool m = made || n.made_by;
    if (n.is_dir())
      made_files(v, n, p, m, out);
    else if (m && n.is_file() && !n.is_live())
      out.insert(p);
  }
}

// The source and what each of its made-up files holds, each built alone by one thread.
struct Corpus {
  std::string root;
  std::vector<std::string> paths;
  std::vector<std::string> bytes;
  uint64_t weight = 0;  // what the built files keep in the cache, all together
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    c.root = temp_dir() + "/run";
    std::filesystem::create_directory(c.root);
    for (const auto& [name, fixture] : kSources) copy_fixture(fixture + "/checkpoint", c.root + "/" + name);
    auto ref = View::load(c.root);
    std::set<std::string> paths;
    made_files(*ref, *ref->tree().get(view::Tree::kRoot), "", false, paths);
    for (const auto& [name, fixture] : kSources)
      for (const std::string& t : kTargets) {  // a listing of layouts/ shows only a few targets
        const std::string dir = "/" + name + "/layouts/" + t;
        const Inode* n = find(*ref, dir);
        if (!n) throw std::runtime_error("no " + dir);
        made_files(*ref, *n, dir, true, paths);
      }
    c.paths.assign(paths.begin(), paths.end());
    for (const std::string& p : c.paths) {
      const Inode& n = at(*ref, p);
      c.bytes.push_back(content_of(*ref, n));
      c.weight += ref->content(n)->memory_bytes();
    }
    return c;
  }();
  return c;
}

int reads_per_thread() {
  if (const char* s = std::getenv("ZM_STRESS_READS")) return std::max(1, std::atoi(s));
#ifdef ZM_STRESS_TSAN
  return 150;  // ~15x slower under ThreadSanitizer: the same storm, shorter
#else
  return 1500;
#endif
}

struct Storm {
  size_t threads = 0, files = 0, reads = 0, bytes = 0, bad = 0, errors = 0;
  uint64_t evicted_in_use = 0, plans_evicted_in_use = 0;
  double seconds = 0;
  std::string first_bad;
};

// Each thread opens a random file, reads 1-4 random ranges of it (holding it open meanwhile, as a
// reader of the mount holds its file handle) and compares them with the file built alone.
Storm storm(size_t cache_bytes, int threads) {
  const Corpus& c = corpus();
  view::ViewOptions o;
  o.cache_bytes = cache_bytes;
  auto v = View::load(c.root, o);
  std::vector<const Inode*> files;
  for (const std::string& p : c.paths) files.push_back(&at(*v, p));  // lookups only: nothing built yet
  const int per_thread = reads_per_thread();
  const uint64_t plans0 = view::plan_weight().evicted_in_use.load();
  std::atomic<size_t> reads{0}, bytes{0}, bad{0}, errors{0};
  std::mutex mu;
  std::string first_bad;
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(uint64_t(t) * 7919 + cache_bytes);
      std::string buf;
      while (!go.load()) std::this_thread::yield();
      for (int r = 0; r < per_thread;) {
        // Half the opens go to 4 hot files, another 4 every 512 reads: many threads then open a
        // file whose build is still running (they must wait for it) or that was just evicted.
        const size_t hot = (reads.load(std::memory_order_relaxed) / 512 * 4 + rng() % 4) * 7919;
        const size_t k = (rng() % 2 ? rng() : hot) % files.size();
        const std::string& want = c.bytes[k];
        try {
          const auto f = v->open(*files[k], O_RDONLY);
          bool ok = f.size() == want.size();
          for (int i = 0, n = 1 + int(rng() % 4); i < n && r < per_thread; ++i, ++r) {
            const uint64_t off = rng() % (want.size() + 1);
            const uint64_t len = rng() % 8 == 0 ? want.size() : 1 + rng() % 8192;
            buf.assign(len, '\0');
            buf.resize(f.read(off, buf.data(), len));
            ok = ok && buf == want.substr(off, len);
            bytes += buf.size();
            ++reads;
          }
          if (!ok && bad++ == 0) {
            std::lock_guard<std::mutex> lock(mu);
            first_bad = c.paths[k] + ": bytes differ from the file built alone";
          }
        } catch (const std::exception& e) {
          ++r;
          if (errors++ == 0) {
            std::lock_guard<std::mutex> lock(mu);
            first_bad = c.paths[k] + ": " + e.what();
          }
        }
      }
    });
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& t : pool) t.join();
  Storm s;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.threads = size_t(threads);
  s.files = files.size();
  s.reads = reads;
  s.bytes = bytes;
  s.bad = bad;
  s.errors = errors;
  s.first_bad = first_bad;
  s.evicted_in_use = v->files_evicted_in_use();
  s.plans_evicted_in_use = view::plan_weight().evicted_in_use.load() - plans0;
  return s;
}

void report(const char* name, size_t budget, const Storm& s) {
  std::cout << "[ stress   ] " << name << ": budget " << budget << " B of " << corpus().weight << " B, " << s.threads
            << " threads, " << s.files << " files, " << s.reads << " reads, " << s.bytes << " bytes compared, "
            << s.evicted_in_use << " files and " << s.plans_evicted_in_use << " plans evicted while in use, "
            << s.seconds << " s" << std::endl;
  ::testing::Test::RecordProperty("threads", int(s.threads));
  ::testing::Test::RecordProperty("files", int(s.files));
  ::testing::Test::RecordProperty("reads", int(s.reads));
  ::testing::Test::RecordProperty("bytes_compared", std::to_string(s.bytes));
  ::testing::Test::RecordProperty("files_evicted_in_use", std::to_string(s.evicted_in_use));
  ::testing::Test::RecordProperty("plans_evicted_in_use", std::to_string(s.plans_evicted_in_use));
}

void check(const Storm& s) {
  EXPECT_EQ(s.bad, 0u) << s.first_bad;
  EXPECT_EQ(s.errors, 0u) << s.first_bad;
  EXPECT_EQ(s.reads, s.threads * size_t(reads_per_thread()));
  EXPECT_GT(s.evicted_in_use, 0u) << "the storm never evicted a file being built or read: it proves nothing";
}

TEST(CacheConcurrency, CorpusHasEveryKindOfMadeUpFile) {
  const Corpus& c = corpus();
  for (const char* kind : {"_universal/zero/", "_universal/mp_rank_00_model_states.pt", "_fp32/", "_bf16/", "_dcp/",
                           "/layouts/zero2-dp4-fp32/global_step3/", "/layouts/zero3-dp3-fp32/global_step3/",
                           "/layouts/fsdp-dp3/", "optim_states.pt"}) {
    size_t n = 0;
    for (const std::string& p : c.paths) n += p.find(kind) != std::string::npos;
    EXPECT_GT(n, 0u) << kind;
  }
  EXPECT_GT(c.paths.size(), 100u);
}

// An eighth of what the files keep: most opens build, some find their file kept.
TEST(CacheConcurrency, SixteenThreadsWithASmallByteBudget) {
  const size_t budget = corpus().weight / 8;
  const Storm s = storm(budget, 16);
  report("small budget", budget, s);
  check(s);
}

// Only the newest file is kept: every other open builds, and evicts what another thread reads.
TEST(CacheConcurrency, SixteenThreadsWithAByteBudgetOfZero) {
  const Storm s = storm(0, 16);
  report("budget zero", 0, s);
  check(s);
}

}  // namespace
}  // namespace zm::test
