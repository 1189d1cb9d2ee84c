// A network source that stops answering (issue 40): reads are answered by a deadline with EIO
// naming the shard, never ESTALE; while a read is still pending below, reads fail at once; once it
// answers, reads go on without a remount. A source that never answers is a FIFO in a shard's place:
// open(2) of it blocks until a writer comes, as a read of a gone backend does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/shard_names.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/off_path.h"

namespace zm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::at;
using test::find;

// A latch the test opens: work that waits on it is work a backend does not answer.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(OffPath, AnswersWithinTheDeadlineOrSaysItDidNot) {
  view::OffPath pool(1);
  int ran = 0;
  EXPECT_TRUE(pool.run([&] { ++ran; }, 10s));
  EXPECT_EQ(ran, 1);
  EXPECT_THROW(pool.run([] { throw Error("backend says no", EIO); }, 10s), Error) << "its error comes back";

  auto gate = std::make_shared<Gate>();
  EXPECT_FALSE(pool.run([gate] { gate->wait(); }, 50ms)) << "the caller stops waiting";
  EXPECT_EQ(pool.overdue(), 1u);
  // Queued behind it: dropped when its caller stops waiting, or kept to run later.
  auto dropped = std::make_shared<std::atomic<int>>(0), kept = std::make_shared<std::atomic<int>>(0);
  EXPECT_FALSE(pool.run([dropped] { ++*dropped; }, 20ms));
  EXPECT_FALSE(pool.run([kept] { ++*kept; }, 20ms, view::OffPath::Unwaited::Keep));
  EXPECT_EQ(pool.timeouts(), 3u);
  gate->release();
  EXPECT_TRUE(pool.run([] {}, 10s)) << "after the one below answered";
  EXPECT_EQ(pool.overdue(), 0u);
  EXPECT_EQ(*dropped, 0) << "a read nobody waits for is never made";
  EXPECT_EQ(*kept, 1);
}

TEST(OffPath, DestructionWaitsForWorkBelow) {
  auto gate = std::make_shared<Gate>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  {
    view::OffPath pool(2);
    EXPECT_FALSE(pool.run(
        [gate, finished] {
          gate->wait();
          *finished = true;
        },
        10ms));
    std::thread([gate] {
      std::this_thread::sleep_for(20ms);
      gate->release();
    }).detach();
  }
  EXPECT_TRUE(*finished);
}

TEST(SourceDeadline, ReadsInPiecesEqualTheFile) {
  // Larger than a piece (4 MiB), from an odd offset: every byte lands where it belongs.
  const std::string path = test::temp_dir() + "/shard";
  std::string bytes(9 << 20, '\0');
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = char((k * 2654435761u) >> 13);
  test::write_file(path, bytes);
  view::FileTable t;
  t.set_deadline(60s);
  const uint32_t id = t.add(path);
  std::string got(bytes.size() - 7, '\0');
  t.pread(id, 7, got.data(), got.size());
  EXPECT_TRUE(got == bytes.substr(7));
  EXPECT_EQ(t.timeouts(), 0u);
}

// A tag whose rank files stop answering after the mount, then answer again.
struct StalledShards {
  std::string src = test::temp_dir() + "/ckpt";
  std::string tag = src + "/global_step3/";
  std::vector<std::string> ranks = {ds::optim_states_name("", 0, 0), ds::optim_states_name("", 1, 0)};
  StalledShards() { fs::copy(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint", src, fs::copy_options::recursive); }
  void stall() {
    for (const auto& r : ranks) {
      fs::rename(tag + r, tag + r + ".away");
      ASSERT_EQ(mkfifo((tag + r).c_str(), 0644), 0);
    }
  }
  // Lets each open blocked on a FIFO go (a writer comes and goes), then puts the files back.
  void answer() {
    for (const auto& r : ranks) {
      const int fd = ::open((tag + r).c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO if nobody waits on it
      if (fd >= 0) ::close(fd);
      fs::remove(tag + r);
      fs::rename(tag + r + ".away", tag + r);
    }
  }
};

std::string read_error(const view::View& v, const std::string& path) {
  try {
    test::content_of(v, at(v, path));
  } catch (const Error& e) {
    EXPECT_EQ(e.errno_value(), EIO) << e.what();
    return e.what();
  }
  return "";
}

TEST(SourceDeadline, AGoneSourceGivesEioNamingTheShardThenRecovers) {
  StalledShards s;
  view::ViewOptions o;
  o.rescan_seconds = 0;
  o.source_timeout_seconds = 0.5;
  auto v = view::View::load(s.src, o);
  v->start_serving();
  const std::string shard = "/global_step3/" + s.ranks[0];
  const std::string built = "/global_step3_universal/zero/fc1.weight/exp_avg.pt";
  at(*v, shard), at(*v, built);  // looked up (listed) while the source answers
  s.stall();
  const std::string first = read_error(*v, shard);
  EXPECT_NE(first.find(s.ranks[0]), std::string::npos) << first;
  EXPECT_NE(first.find("no answer from the source in 0.5 s"), std::string::npos) << first;
  // While it is pending below, of two reads at once (a made-up file built from the other rank's
  // shard, and the shard itself) one tries the source and the other fails at once.
  std::string probe;
  std::thread other([&] { probe = read_error(*v, built); });
  const std::string second = read_error(*v, shard);
  other.join();
  // (The fail-at-once message says "had no answer for over": the probe's is "no answer from".)
  const bool probed_here = second.find("no answer from the source") != std::string::npos;
  EXPECT_NE((probed_here ? probe : second).find("reads fail at once until it answers"), std::string::npos)
      << second << "\n"
      << probe;
  EXPECT_NE((probed_here ? second : probe).find("no answer from the source"), std::string::npos) << second << "\n"
                                                                                                 << probe;
  // Listings and lookups of what is known answer meanwhile.
  EXPECT_NE(find(*v, "/layouts/zero2-dp2-fp32/global_step3"), nullptr);
  EXPECT_NE(v->stats_text({}).find("source_timeouts 2\n"), std::string::npos) << v->stats_text({});
  s.answer();
  // The read below ends (the FIFO is no shard: its own error, dropped); reads go on, unmounted.
  std::string got;
  for (int k = 0; k < 500 && got.empty(); ++k) {
    try {
      got = test::content_of(*v, at(*v, shard));
    } catch (const Error& e) {
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_TRUE(got == test::read_file(s.tag + s.ranks[0]));
}

}  // namespace
}  // namespace zm
