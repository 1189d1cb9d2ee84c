// Bad input gets a zm::Error naming the file, never a crash (run these under ZM_SANITIZE too).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/pt_writer.h"

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
  // A list that contains itself: copying it must stop, not recurse forever; the copy is the same cycle.
  pt::Arena b;
  const pt::Node* cyc = pt::decode_pickle(
      "\x80\x02]q\x00h\x00"
      "a."s,
      b, "cycle.pkl", none);
  EXPECT_EQ(cyc->items.at(0), cyc);
  pt::Arena c;
  const pt::Node* copied = c.copy(cyc);
  ASSERT_NE(copied, cyc);
  EXPECT_EQ(copied->items.at(0), copied);
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

// --- Checkpoints whose pickles were edited: the index refuses them, naming file and key path. ---

namespace fs = std::filesystem;
using pt::Node;

Node* mut(const Node* n) {
  return const_cast<Node*>(n);
}
Node* at(const Node* dict, const char* key) {
  const Node* v = dict->get(key);
  if (!v) throw std::runtime_error(std::string("test: no key ") + key);
  return mut(v);
}

// Rewrites `path` with its pickle changed by `edit`; the tensor bytes are those of the original.
void rewrite_pt(const std::string& path, const std::function<void(pt::Arena&, Node&)>& edit) {
  auto f = pt::load_pt(path);
  std::vector<const Node*> todo{f->root};
  std::set<const Node*> seen;
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    if (n->kind == pt::Kind::Tensor) {  // its bytes become those of its record in the original
      const pt::Extent e{0, n->tensor->byte_offset(), n->tensor->nbytes()};
      n->tensor->storage = pt::MadeStorage{};
      n->tensor->bytes().append_extent(e);
    }
    for (const Node* c : n->items) todo.push_back(c);
    for (const auto& [k, v] : n->entries) todo.push_back(v);
    todo.insert(todo.end(), {n->state, n->args, n->callee});
  }
  edit(f->arena, *mut(f->root));
  pt::PtOptions opts;
  opts.prefix = f->prefix;
  const std::string bytes = read_all(pt::build_pt(f->root, opts), PathSource({path}));
  write_file(path, bytes);
}

std::string edited_tag_error(const std::string& fixture, const std::string& file,
                             const std::function<void(pt::Arena&, Node&)>& edit) {
  const std::string dst = temp_dir() + "/global_step3";
  copy_fixture(fixture + "/checkpoint/global_step3", dst);
  rewrite_pt(dst + "/" + file, edit);
  try {
    ds::index_tag(dst);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

const char* kFp16Optim = "zero_pp_rank_0_mp_rank_00_optim_states.pt";

Node& loss_scaler_state(Node& root) {
  return *mut(at(at(&root, "optimizer_state_dict"), "loss_scaler")->state);
}

TEST(HostileCheckpoint, RewrittenFixtureStillIndexes) {  // the rewriting itself changes nothing
  EXPECT_EQ(edited_tag_error("z2_ws2_fp16_pg2", kFp16Optim, [](pt::Arena&, Node&) {}), "");
}

TEST(HostileCheckpoint, UnexpectedLossScalerFieldIsRefused) {
  const std::string err = edited_tag_error("z2_ws2_fp16_pg2", kFp16Optim, [](pt::Arena& a, Node& root) {
    loss_scaler_state(root).entries.emplace_back(a.make_str("surprise"), a.make_int(1));
  });
  EXPECT_NE(err.find(kFp16Optim), std::string::npos) << err;
  EXPECT_NE(err.find("'optimizer_state_dict.loss_scaler.surprise'"), std::string::npos) << err;
}

TEST(HostileCheckpoint, MissingLossScalerFieldIsRefused) {
  const std::string err = edited_tag_error("z2_ws2_fp16_pg2", kFp16Optim, [](pt::Arena&, Node& root) {
    auto& e = loss_scaler_state(root).entries;
    e.erase(std::remove_if(e.begin(), e.end(), [](const auto& kv) { return kv.first->s == "cur_hysteresis"; }),
            e.end());
  });
  EXPECT_NE(err.find(kFp16Optim), std::string::npos) << err;
  EXPECT_NE(err.find("'optimizer_state_dict.loss_scaler.cur_hysteresis'"), std::string::npos) << err;
}

TEST(HostileCheckpoint, UnknownLossScalerClassOrFieldTypeIsRefused) {
  std::string err = edited_tag_error("z2_ws2_fp16_pg2", kFp16Optim, [](pt::Arena& a, Node& root) {
    mut(at(&root, "optimizer_state_dict"))->entries[0].second = a.copy(a.make_global("torch", "float16"));
  });
  EXPECT_NE(err.find("'optimizer_state_dict.loss_scaler'"), std::string::npos) << err;
  err = edited_tag_error("z2_ws2_fp16_pg2", kFp16Optim, [](pt::Arena& a, Node& root) {
    for (auto& [k, v] : loss_scaler_state(root).entries)
      if (k->s == "dtype") v = a.make_str("float16");
  });
  EXPECT_NE(err.find("'optimizer_state_dict.loss_scaler.dtype'"), std::string::npos) << err;
}

// The message names the list whose count is wrong, and both counts (issue 19: it said "has 1 param
// groups, ... has 1"). A state of some groups only (neither all nor none) is refused too.
TEST(HostileCheckpoint, WrongGroupCountsAreNamed) {
  const char* file = "zero_pp_rank_1_mp_rank_00_optim_states.pt";
  std::string err = edited_tag_error("z2_ws2_fp32_pg2", file, [](pt::Arena&, Node& root) {
    mut(at(at(&root, "optimizer_state_dict"), "single_partition_of_fp32_groups"))->items.pop_back();
  });
  EXPECT_NE(err.find("'optimizer_state_dict.single_partition_of_fp32_groups': has 1 param groups, param_shapes in "
                     "the model file has 2"),
            std::string::npos)
      << err;
  err = edited_tag_error("z2_ws2_fp32_pg2", file, [](pt::Arena&, Node& root) {
    mut(at(at(at(&root, "optimizer_state_dict"), "base_optimizer_state"), "state"))->entries.pop_back();
  });
  EXPECT_NE(err.find("'optimizer_state_dict.base_optimizer_state.state': holds the state of 1 param groups, not of "
                     "all 2"),
            std::string::npos)
      << err;
}

// A per-group value of a kind no optimizer keeps (a string) is named, not dropped.
TEST(HostileCheckpoint, UnsupportedPerGroupValueIsNamed) {
  const char* file = "zero_pp_rank_0_mp_rank_00_optim_states.pt";
  const std::string err = edited_tag_error("z2_ws2_fp32_pg2", file, [](pt::Arena& a, Node& root) {
    const Node* state = at(at(at(&root, "optimizer_state_dict"), "base_optimizer_state"), "state");
    for (auto& [k, v] : mut(state->get(int64_t(0)))->entries)
      if (k->s == "step") v = a.make_str("three");
  });
  EXPECT_NE(err.find("'optimizer_state_dict.base_optimizer_state.state[0].step': unsupported per-group"),
            std::string::npos)
      << err;
}

// exp_avg of group 0 on rank 1 saved as bf16 (same bytes, twice the elements) beside fp32 masters.
TEST(HostileCheckpoint, MixedStateDtypesAreRefused) {
  const char* file = "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt";
  const std::string err = edited_tag_error("z2_ws2_bf16_pg2", file, [](pt::Arena&, Node& root) {
    const Node* state = at(at(at(&root, "optimizer_state_dict"), "base_optimizer_state"), "state");
    pt::Tensor& t = *mut(state->get(int64_t(0)))->get("exp_avg")->tensor;
    t.dtype = pt::DType::BF16;
    t.shape = {t.shape[0] * 2};
  });
  EXPECT_NE(err.find(file), std::string::npos) << err;
  EXPECT_NE(err.find("'optimizer_state_dict.base_optimizer_state.state[0].exp_avg'"), std::string::npos) << err;
  EXPECT_NE(err.find("mixed dtypes"), std::string::npos) << err;
}

// One module weight saved as fp16 among bf16 ones: there is no single training precision.
TEST(HostileCheckpoint, MixedModuleDtypesAreRefused) {
  const char* file = "mp_rank_00_model_states.pt";
  for (const char* fixture : {"z2_ws2_bf16_pg2", "z1_ws2_bf16_pg2_fp32acc"}) {
    const std::string err = edited_tag_error(fixture, file, [](pt::Arena&, Node& root) {
      at(&root, "module")->get("fc1.bias")->tensor->dtype = pt::DType::F16;
    });
    EXPECT_NE(err.find(file), std::string::npos) << err;
    EXPECT_NE(err.find("'module.fc1.bias'"), std::string::npos) << err;
    EXPECT_NE(err.find("mixed dtypes"), std::string::npos) << err;
  }
}

// A bf16 storage record one byte longer than its pickle says (an odd byte count): the zip's
// central directory is patched, since no writer makes such a file.
TEST(HostileCheckpoint, OddBf16ByteCountIsRefused) {
  const std::string dst = temp_dir() + "/global_step3";
  copy_fixture("z2_ws2_bf16_pg2/checkpoint/global_step3", dst);
  const std::string file = dst + "/mp_rank_00_model_states.pt";
  std::string bytes = read_file(file);
  size_t patched = 0;
  for (size_t at = bytes.find("PK\x01\x02"); at != std::string::npos && !patched;
       at = bytes.find("PK\x01\x02", at + 4)) {
    uint32_t csize, usize;
    memcpy(&csize, bytes.data() + at + 20, 4);
    memcpy(&usize, bytes.data() + at + 24, 4);
    if (csize != 60 || usize != 60) continue;  // a bf16[30] record
    const uint32_t odd = 61;
    memcpy(bytes.data() + at + 20, &odd, 4);
    memcpy(bytes.data() + at + 24, &odd, 4);
    ++patched;
  }
  ASSERT_EQ(patched, 1u);
  write_file(file, bytes);
  std::string err;
  try {
    ds::index_tag(dst);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("mp_rank_00_model_states.pt"), std::string::npos) << err;
  EXPECT_NE(err.find("61 bytes"), std::string::npos) << err;
}

}  // namespace
}  // namespace zm::test
