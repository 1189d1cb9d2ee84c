// Bad input gets a zm::Error naming the file, never a crash (run these under ZM_SANITIZE too).
#include <gtest/gtest.h>

#include <random>

#include "helpers.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/pt_file.h"

namespace zm::test {
namespace {

using namespace std::string_literals;

// Loads and fully walks a file; returns "" on success or the error text.
std::string try_load(const std::string& path) {
  try {
    auto f = pt::load_pt(path);
    pt::dump_tree(*f);
    pt::dump_json(*f);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

const std::string kSmall =
    kFixtures + "/z3_ws2_fp32_pg2/checkpoint/global_step3/zero_pp_rank_1_mp_rank_00_model_states.pt";

TEST(Hostile, TruncatedAtEveryByte) {
  const std::string bytes = read_file(kSmall), dir = temp_dir(), path = dir + "/t.pt";
  size_t refused = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_file(path, bytes.substr(0, n));
    const std::string err = try_load(path);
    EXPECT_NE(err, "") << "a file cut to " << n << " bytes was accepted";
    EXPECT_NE(err.find("t.pt"), std::string::npos) << err;
    refused += !err.empty();
  }
  EXPECT_EQ(refused, bytes.size());
}

TEST(Hostile, RandomByteFlips) {
  const std::string bytes = read_file(kSmall), dir = temp_dir(), path = dir + "/f.pt";
  std::mt19937 rng(1234);
  size_t refused = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string b = bytes;
    for (int flips = 1 + int(rng() % 4); flips > 0; --flips) b[rng() % b.size()] ^= char(1 + rng() % 255);
    write_file(path, b);
    refused += !try_load(path).empty();  // accepted is fine (tensor bytes are not checked); crashing is not
  }
  EXPECT_GT(refused, 100u);
}

std::string decode_error(const std::string& pickle) {
  pt::Arena a;
  auto resolve = [](const std::string&, uint64_t) -> uint64_t { throw FormatError("no storage"); };
  try {
    const pt::Node* n = pt::decode_pickle(pickle, a, "hostile.pkl", resolve);
    pt::repr(n, 50);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Hostile, AbsurdPickles) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""s},
      {"no STOP", "\x80\x02N"s},
      {"STOP on empty stack", "\x80\x02."s},
      {"BINUNICODE claims 4 GiB",
       "\x80\x02X\xff\xff\xff\xff"
       "abc."s},
      {"BINBYTES8 claims 2^63", "\x80\x04\x8e\x00\x00\x00\x00\x00\x00\x00\x80."s},
      {"LONG4 negative length", "\x80\x02\x8b\xff\xff\xff\xff."s},
      {"LONG4 huge length", "\x80\x02\x8b\xff\xff\xff\x7f."s},
      {"BINGET of nothing", "\x80\x02h\x05."s},
      {"LONG_BINGET far", "\x80\x02j\xff\xff\xff\xff."s},
      {"APPEND to an int",
       "\x80\x02K\x01K\x02"
       "a."s},
      {"SETITEM on a list", "\x80\x02]K\x01K\x02s."s},
      {"SETITEMS odd", "\x80\x02}(K\x01u."s},
      {"POP_MARK without MARK", "\x80\x02N1."s},
      {"TUPLE3 on one value", "\x80\x02N\x87."s},
      {"unknown opcode", "\x80\x02\xff."s},
      {"protocol 9", "\x80\x09N."s},
      {"storage pid of wrong arity", "\x80\x02(X\x07\x00\x00\x00storagetQ."s},
      {"storage with absurd numel",
       "\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
       "0X\x03\x00\x00\x00"
       "cpu\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7ftQ."s},
      {"rebuild with a non-storage", "\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(NK\x00)))\x89NtR."s},
      {"extension opcode", "\x80\x02\x82\x01."s},
      {"values left at STOP", "\x80\x02NN."s},
  };
  for (const auto& [what, pickle] : cases) {
    const std::string err = decode_error(pickle);
    EXPECT_NE(err, "") << what << " was accepted";
    EXPECT_NE(err.find("hostile.pkl"), std::string::npos) << what << ": " << err;
  }
}

TEST(Hostile, DeepNestingAndCycles) {
  // A million nested lists: the arena frees them without recursion.
  std::string deep = "\x80\x02"s;
  for (int k = 0; k < 1000000; ++k) deep += "]";
  for (int k = 0; k < 999999; ++k) deep += "a";
  deep += ".";
  pt::Arena a;
  auto none = [](const std::string&, uint64_t) -> uint64_t { return 0; };
  const pt::Node* n = pt::decode_pickle(deep, a, "deep.pkl", none);
  EXPECT_EQ(n->kind, pt::Kind::List);
  EXPECT_LT(pt::repr(n, 1000000).size(), 2000u);  // rendering is bounded
  // A list that contains itself: walking it must stop with an error, not recurse forever.
  pt::Arena b;
  const pt::Node* cyc = pt::decode_pickle(
      "\x80\x02]q\x00h\x00"
      "a."s,
      b, "cycle.pkl", none);
  EXPECT_EQ(cyc->items.at(0), cyc);
  EXPECT_THROW(b.copy(cyc), Error);
}

TEST(Hostile, MarksAndStackAreBounded) {
  std::string marks = "\x80\x02"s + std::string(100000, '(') + "N.";
  EXPECT_NE(decode_error(marks), "");
  pt::Arena a;
  pt::PickleLimits tight;
  tight.max_stack = 1000;
  auto none = [](const std::string&, uint64_t) -> uint64_t { return 0; };
  EXPECT_THROW(pt::decode_pickle("\x80\x02"s + std::string(2000, 'N'), a, "stack.pkl", none, tight), FormatError);
}

}  // namespace
}  // namespace zm::test
