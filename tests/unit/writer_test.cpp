// The lazy writer: files it lays out parse back with the same values and bytes, records are
// 64-byte aligned, zip64 appears past 4 GiB, and every pickle form round-trips.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "helpers.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/crc32.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/pickle_writer.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::test {
namespace {

using pt::Kind;
using pt::Node;

// Serves `source` 0 from a string.
class StringSource : public pt::ExtentReader {
 public:
  explicit StringSource(std::string s) : s_(std::move(s)) {}
  void pread(uint32_t, uint64_t off, void* buf, size_t n) const override { memcpy(buf, s_.data() + off, n); }

 private:
  std::string s_;
};

Node* tensor(pt::Arena& a, std::vector<int64_t> shape, std::vector<pt::Extent> data, pt::DType dt = pt::DType::F32) {
  pt::Tensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  for (const pt::Extent& e : data) t.bytes().append_extent(e);
  return a.make_tensor_node(std::move(t));
}

std::unique_ptr<pt::PtFile> write_and_load(const pt::VirtualFile& vf, const pt::ExtentReader& src,
                                           const std::string& dir) {
  write_file(dir + "/out.pt", read_all(vf, src));
  return pt::load_pt(dir + "/out.pt");
}

TEST(PtWriter, RoundTripsTensorsFromExtents) {
  std::string data;
  for (int k = 0; k < 100; ++k) data += char(k);
  StringSource src(data);
  pt::Arena a;
  Node* d = a.make(Kind::Dict);
  d->entries.emplace_back(a.make_str("cat_dim"), a.make_int(0));
  // A 2x3 float tensor made of two pieces of the source, out of order.
  d->entries.emplace_back(a.make_str("param"), tensor(a, {2, 3}, {{0, 40, 12}, {0, 4, 12}}));
  d->entries.emplace_back(a.make_str("step"), tensor(a, {}, {{0, 96, 4}}));
  const pt::VirtualFile vf = pt::build_pt(d);
  const std::string dir = temp_dir();
  auto f = write_and_load(vf, src, dir);
  EXPECT_EQ(f->prefix, "archive");
  const Node* p = f->root->get("param");
  ASSERT_EQ(p->kind, Kind::Tensor);
  EXPECT_EQ(p->tensor->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p->tensor->stride, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(tensor_bytes(*f, *p->tensor), data.substr(40, 12) + data.substr(4, 12));
  EXPECT_EQ(p->tensor->record().offset % 64, 0u);
  EXPECT_EQ(f->root->get("cat_dim")->i, 0);
  EXPECT_EQ(tensor_bytes(*f, *f->root->get("step")->tensor), data.substr(96, 4));
}

TEST(PtWriter, SizeIsKnownWithoutReadingData) {
  pt::Arena a;
  // Layout needs names and sizes only: a ExtentReader that fails on any read proves it.
  const pt::VirtualFile vf = pt::build_pt(tensor(a, {1000}, {{7, 0, 4000}}));
  EXPECT_GT(vf.size(), 4000u);
  uint64_t data = 0;
  for (const auto& s : vf.segments())
    if (s.kind == pt::Segment::Stored) data += s.length;
  EXPECT_EQ(data, 4000u);
}

// pt_size lays out the same records without their content: the size build_pt gives, for any
// archive name, key order, byteorder record and zip64 case (a 4 GiB + 100 B record, one past it).
TEST(PtWriter, SizedWithoutBuildingIsTheBuiltSize) {
  pt::Arena a;
  Node* d = a.make(Kind::Dict);
  d->entries.emplace_back(a.make_str("big"),
                          tensor(a, {(int64_t(1) << 32) + 100}, {{0, 0, (uint64_t(1) << 32) + 100}}, pt::DType::U8));
  for (int k = 0; k < 11; ++k)
    d->entries.emplace_back(a.make_str("t" + std::to_string(k)), tensor(a, {k + 1}, {{0, 0, uint64_t(4 * (k + 1))}}));
  const pt::PtRecords records = pt::pt_records(d);
  EXPECT_EQ(records.storages.size(), 12u);
  for (const char* prefix :
       {"a", "zero_pp_rank_7_mp_rank_00_optim_states", "zero_pp_rank_4095_mp_rank_00_optim_states"})
    for (bool byteorder : {true, false})
      for (bool legacy : {false, true}) {
        pt::PtOptions o;
        o.prefix = prefix;
        o.byteorder = byteorder;
        o.legacy_key_order = legacy;
        EXPECT_EQ(pt::pt_size(records, o), pt::build_pt(d, o).size()) << prefix << byteorder << legacy;
      }
}

TEST(PtWriter, ReadsTouchOnlyOverlappedSegments) {
  class Counting : public pt::ExtentReader {
   public:
    mutable uint64_t bytes = 0;
    void pread(uint32_t, uint64_t, void* buf, size_t n) const override {
      bytes += n;
      memset(buf, 1, n);
    }
  } src;
  pt::Arena a;
  const pt::VirtualFile vf = pt::build_pt(tensor(a, {1 << 20}, {{0, 0, 4u << 20}}));
  char buf[100];
  EXPECT_EQ(vf.read(0, buf, 64, src), 64u);  // the header alone
  EXPECT_EQ(src.bytes, 0u);
  EXPECT_EQ(vf.read(vf.size() - 100, buf, 100, src), 100u);  // the tail alone
  EXPECT_EQ(src.bytes, 0u);
  EXPECT_EQ(vf.read(vf.size() - 10, buf, 100, src), 10u);  // short only at the end
  EXPECT_EQ(vf.read(vf.size(), buf, 100, src), 0u);
}

TEST(PtWriter, Zip64PastFourGiB) {
  // A 4 GiB + 100 B record and a record past 4 GiB, as in the spec's Appendix A experiment.
  pt::Arena a;
  Node* d = a.make(Kind::Dict);
  d->entries.emplace_back(a.make_str("big"),
                          tensor(a, {(int64_t(1) << 32) + 100}, {{0, 0, (uint64_t(1) << 32) + 100}}, pt::DType::U8));
  d->entries.emplace_back(a.make_str("small"), tensor(a, {5}, {{0, 0, 20}}));
  pt::PtOptions o;
  o.byteorder = false;
  const pt::VirtualFile vf = pt::build_pt(d, o);
  // Write the headers only, into a sparse file; the data stays holes.
  const std::string dir = temp_dir(), path = dir + "/big.pt";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t(vf.size())), 0);
  StringSource none("");
  for (const auto& s : vf.segments()) {
    if (s.kind != pt::Segment::Inline) continue;
    std::string bytes(s.length, '\0');
    vf.read(s.start, bytes.data(), bytes.size(), none);
    ASSERT_EQ(pwrite(fd, bytes.data(), bytes.size(), off_t(s.start)), ssize_t(bytes.size()));
  }
  close(fd);
  auto f = pt::load_pt(path);
  const pt::Tensor& big = *f->root->get("big")->tensor;
  const pt::Tensor& small = *f->root->get("small")->tensor;
  EXPECT_EQ(big.nbytes(), (uint64_t(1) << 32) + 100);
  EXPECT_EQ(big.record().offset % 64, 0u);
  EXPECT_GT(small.record().offset, uint64_t(1) << 32);
  EXPECT_EQ(small.record().offset % 64, 0u);
  unlink(path.c_str());
}

TEST(PtWriter, OptionalRealCrc) {
  const std::string data(1000, 'x');
  StringSource src(data);
  pt::Arena a;
  pt::PtOptions o;
  o.crc_source = &src;
  const pt::VirtualFile vf = pt::build_pt(tensor(a, {250}, {{0, 0, 1000}}), o);
  const std::string dir = temp_dir();
  write_file(dir + "/c.pt", read_all(vf, src));
  pt::File file(dir + "/c.pt");
  pt::ZipReader zip(file);
  const pt::ZipEntry* rec = zip.find("data/0");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->crc, pt::crc32(data.data(), data.size()));
  EXPECT_EQ(zip.find("data.pkl")->crc,
            pt::crc32(zip.read(*zip.find("data.pkl"), 1 << 20).data(), zip.find("data.pkl")->size));
}

// A copy of a made tensor shares its pieces until one of them appends; then each has its own, as
// when a tensor's pieces were a vector held by value.
TEST(PtWriter, ACopiedTensorsBytesAreItsOwnOnceItAppends) {
  pt::Tensor a;
  a.shape = {2};
  a.bytes().append_zero(4);
  pt::Tensor b = a;
  EXPECT_EQ(b.made().bytes, a.made().bytes) << "a copy shares";
  b.bytes().append_zero(4);
  EXPECT_EQ(a.made().bytes->size(), 4u) << "the original is unchanged";
  EXPECT_EQ(b.made().bytes->size(), 8u);
  a.bytes().append_zero(4);
  EXPECT_EQ(a.made().bytes->size(), 8u);
  EXPECT_EQ(b.made().bytes->size(), 8u);
}

// VirtualFile::append of any range of a file of every kind of piece reads as that range of the
// original, whose content is built beside it as a string.
TEST(VirtualFileAppend, AnyRangeReadsAsThatRangeOfTheOriginal) {
  struct Mem : pt::ExtentReader {
    std::string file;
    void pread(uint32_t, uint64_t offset, void* buf, size_t n) const override { memcpy(buf, file.data() + offset, n); }
  } mem;
  struct Text : pt::Computed {
    std::string s;
    explicit Text(std::string t) : s(std::move(t)) {}
    uint64_t size() const override { return s.size(); }
    void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader&) const override {
      memcpy(out, s.data() + offset, n);
    }
  };
  std::mt19937_64 rng(7);
  for (int k = 0; k < 256; ++k) mem.file.push_back(char(rng()));
  pt::VirtualFile f;
  std::string expect;
  for (int k = 0; k < 60; ++k) {
    const size_t n = 1 + rng() % 23;
    std::string b;
    switch (rng() % 4) {
      case 0:
        b.assign(n, char('a' + k % 26));
        f.append_inline(b);
        break;
      case 1: {
        const uint64_t off = rng() % (mem.file.size() - n);
        f.append_extent({0, off, n});
        b = mem.file.substr(off, n);
        break;
      }
      case 2:
        f.append_zero(n);
        b.assign(n, '\0');
        break;
      default:
        for (size_t j = 0; j < n; ++j) b.push_back(char(rng()));
        f.append_computed(std::make_shared<Text>(b));
    }
    expect += b;
  }
  ASSERT_EQ(f.size(), expect.size());
  for (int t = 0; t < 500; ++t) {
    const uint64_t at = rng() % (expect.size() + 1), n = rng() % (expect.size() - at + 1);
    pt::VirtualFile g;
    g.append_inline("<");
    g.append(f, at, n);
    std::string got(g.size(), '\0');
    ASSERT_EQ(g.read(0, got.data(), got.size(), mem), got.size());
    ASSERT_EQ(got, "<" + expect.substr(at, n)) << at << " + " << n;
  }
  pt::VirtualFile past;
  EXPECT_THROW(past.append(f, 1, f.size()), Error);
}

TEST(PickleWriter, EveryValueKindRoundTrips) {
  pt::Arena a;
  Node* root = pt::build::ordered_dict(a);
  auto add = [&](const char* k, const Node* v) { root->entries.emplace_back(a.make_str(k), v); };
  for (int64_t v : {int64_t(0), int64_t(255), int64_t(256), int64_t(65535), int64_t(65536), int64_t(-1),
                    int64_t(INT32_MIN), int64_t(1) << 40, -(int64_t(1) << 40), INT64_MAX, INT64_MIN})
    add(("i" + std::to_string(v)).c_str(), a.make_int(v));
  Node* f = a.make(Kind::Float);
  f->f = 0.0028000000000000004;
  add("float", f);
  add("none", a.make(Kind::None));
  Node* b = a.make(Kind::Bool);
  b->b = true;
  add("bool", b);
  Node* bytes = a.make(Kind::Bytes);
  bytes->s = std::string("\x00\x7f\x80\xff", 4);
  add("bytes", bytes);
  for (int n = 0; n <= 5; ++n) {
    Node* t = a.make(Kind::Tuple);
    for (int k = 0; k < n; ++k) t->items.push_back(a.make_int(k));
    add(("tuple" + std::to_string(n)).c_str(), t);
  }
  Node* list = a.make(Kind::List);
  for (int k = 0; k < 2500; ++k) list->items.push_back(a.make_int(k));  // crosses APPENDS batches
  add("list", list);
  Node* set = a.make(Kind::Set);
  set->items.push_back(a.make_str("x"));
  add("set", set);
  Node* obj = a.make(Kind::Object);
  obj->how = pt::Build::NewObj;
  obj->callee = a.make_global("deepspeed.runtime.fp16.loss_scaler", "LossScaler");
  obj->args = a.make(Kind::Tuple);
  Node* st = a.make(Kind::Dict);
  st->entries.emplace_back(a.make_str("cur_scale"), f);
  obj->state = st;
  add("obj", obj);
  add("shared", list);  // the same object twice: BINGET the second time
  add("dtype", a.make_global("torch", "float16"));

  const auto pickled = pt::pickle_value(root);
  pt::Arena b2;
  auto none = [](const std::string&, uint64_t) -> uint64_t { return 0; };
  const Node* back = pt::decode_pickle(pickled.pickle, b2, "roundtrip", none);
  EXPECT_EQ(pt::repr(back, 6), pt::repr(root, 6));
  EXPECT_EQ(back->get("i" + std::to_string(INT64_MIN))->i, INT64_MIN);
  EXPECT_EQ(back->get("bytes")->s, bytes->s);
  EXPECT_EQ(back->get("list")->items.size(), 2500u);
  EXPECT_EQ(back->get("shared"), back->get("list"));
  EXPECT_EQ(back->get("obj")->state->get("cur_scale")->f, 0.0028000000000000004);
  EXPECT_EQ(back->get("obj")->how, pt::Build::NewObj);
  EXPECT_TRUE(back->ordered);
  EXPECT_TRUE(back->get("bool")->b);
}

}  // namespace
}  // namespace zm::test

namespace zm::pt {
namespace {

// The debug log's account of a read (moved from the adapter into VirtualFile: the layer that
// knows its pieces names them).
TEST(VirtualFileDescribe, NamesEachPieceARangeTouches) {
  VirtualFile f;
  f.append_inline("abcd");
  f.append_extent({3, 100, 10});
  f.append_zero(6);
  EXPECT_EQ(f.describe(2, 5), "inline +2, file 3 @100 +3");
  EXPECT_EQ(f.describe(8, 100), "file 3 @104 +6, zero +6");
  EXPECT_EQ(f.describe(20, 4), "nothing");
}

}  // namespace
}  // namespace zm::pt
