// What making a file costs at its peak, counted, not timed: this binary replaces operator new and
// delete to count the bytes live at once (issue 40: one `stat` of a DCP folder's `.metadata` at a
// large W took gigabytes for a moment, then gave them back, so no kept-size counter saw it).
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "dcp_synthetic.h"
#include "zeromount/pt/dcp.h"

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

void* counted(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const int64_t now = g_live.fetch_add(int64_t(malloc_usable_size(p))) + int64_t(malloc_usable_size(p));
  for (int64_t peak = g_peak.load(); now > peak && !g_peak.compare_exchange_weak(peak, now);) {
  }
  return p;
}
void uncounted(void* p) noexcept {
  if (!p) return;
  g_live.fetch_sub(int64_t(malloc_usable_size(p)));
  std::free(p);
}

// The peak of live heap bytes while `f` runs, above what was live when it started.
template <typename F>
int64_t peak_of(F&& f) {
  const int64_t base = g_live.load();
  g_peak.store(base);
  f();
  return g_peak.load() - base;
}

}  // namespace

void* operator new(size_t n) {
  return counted(n);
}
void* operator new[](size_t n) {
  return counted(n);
}
void operator delete(void* p) noexcept {
  uncounted(p);
}
void operator delete[](void* p) noexcept {
  uncounted(p);
}
void operator delete(void* p, size_t) noexcept {
  uncounted(p);
}
void operator delete[](void* p, size_t) noexcept {
  uncounted(p);
}

namespace zm::pt::dcp {
namespace {

// `tensors` tensors of 2,000 rows cut at `world` ranks, made on demand: a folder of many chunks
// that no test could hold as items.
test::RowChunks many_chunks(size_t tensors, int world) {
  return test::RowChunks(
      {.tensors = tensors, .rows = 2000, .cols = 2, .world = world, .state = "exp_avg_sq", .length = 1200});
}

TEST(MetadataPeak, LayingOutMillionsOfChunksHoldsABlockNotTheChunks) {
  // 100 tensors at 1,000 and at 10,000 ranks: 100,000 and 200,000 chunks, .metadata of tens of MB.
  for (const int world : {1000, 10000}) {
    const test::RowChunks src = many_chunks(100, world);
    MetadataLayout layout;
    const int64_t peak = peak_of([&] { layout = layout_metadata(src); });
    const uint64_t chunks = 100 * uint64_t(std::min(world, 2000));
    EXPECT_GT(layout.size, chunks * 100) << "about 135 bytes of .metadata per chunk";
    // What is kept: a cursor per 64 KiB block. What is made meanwhile: one part's bytes.
    EXPECT_LE(layout.bytes(), (layout.size / kMetadataBlock + 2) * sizeof(MetadataLayout::Block) + 64);
    EXPECT_LT(peak, int64_t(layout.bytes()) + (1 << 20))
        << world << " ranks: " << chunks << " chunks, " << layout.size << " bytes of .metadata, peak " << peak;
  }
}

TEST(MetadataPeak, ReadingABlockHoldsTheBlock) {
  auto src = std::make_shared<test::RowChunks>(many_chunks(100, 2000));
  const MetadataLayout layout = layout_metadata(*src);
  const VirtualFile f = metadata_file(src, layout);
  std::string buf(1 << 20, '\0');
  struct NoFiles final : ExtentReader {
    void pread(uint32_t, uint64_t, void*, size_t) const override { std::abort(); }
  } none;
  const int64_t peak = peak_of([&] { f.read(layout.size / 2, buf.data(), buf.size(), none); });
  EXPECT_LT(peak, int64_t(4 * kMetadataBlock)) << "one block's bytes at a time, whatever the read's length";
}

}  // namespace
}  // namespace zm::pt::dcp
