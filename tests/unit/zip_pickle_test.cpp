// The reader against real DeepSpeed output: every fixture file parses, tensors stay inside their
// files, DeepSpeed's objects decode, and the less common pickle opcodes work.
#include <gtest/gtest.h>

#include <random>

#include "helpers.h"
#include "zeromount/ds/field.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::test {
namespace {

using namespace std::string_literals;

void check_tensors(const pt::Node* n, uint64_t file_size, int depth, size_t& count) {
  ASSERT_LT(depth, 64);
  if (n->kind == pt::Kind::Tensor) {
    ++count;
    const pt::Tensor& t = *n->tensor;
    EXPECT_LE(t.record().offset + t.record().numel * pt::element_size(t.dtype), file_size);
    EXPECT_EQ(t.record().offset % 64, 0u) << "torch.save aligns records to 64 bytes";
  }
  for (const auto* c : n->items) check_tensors(c, file_size, depth + 1, count);
  for (const auto& [k, v] : n->entries) check_tensors(v, file_size, depth + 1, count);
  if (n->args) check_tensors(n->args, file_size, depth + 1, count);
  if (n->state) check_tensors(n->state, file_size, depth + 1, count);
}

TEST(PtReader, EveryFixtureFileParses) {
  size_t files = 0, tensors = 0;
  for (const auto& name : kFixtureNames) {
    for (const auto& path : pt_files(kFixtures + "/" + name)) {
      SCOPED_TRACE(path);
      auto f = pt::load_pt(path);
      ASSERT_NE(f->root, nullptr);
      check_tensors(f->root, f->file.size(), 0, tensors);
      ++files;
    }
  }
  EXPECT_GT(files, 100u);
  EXPECT_GT(tensors, 300u);
}

TEST(PtReader, DecodesDeepSpeedObjects) {
  auto f =
      pt::load_pt(kFixtures + "/z2_ws2_fp32_pg2/checkpoint/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt");
  ds::Field root(f->root, f->path());
  const ds::Field osd = root["optimizer_state_dict"];
  EXPECT_EQ(osd["zero_stage"].as_int(), 2);
  const ds::Field fa = osd["param_slice_mappings"][0]["fc2.weight"];
  EXPECT_EQ(fa.attr("numel").as_int(), 746);
  EXPECT_EQ(fa.attr("start").as_int(), 0);
  EXPECT_EQ(osd["loss_scaler"].attr("cur_scale").node()->f, 1.0);
  EXPECT_EQ(osd["base_optimizer_state"]["state"].at(0)["exp_avg"].as_tensor().numel(), 958u);
}

TEST(PtReader, ZeroStage3FlatGroupsCarryDsId) {
  auto f =
      pt::load_pt(kFixtures + "/z3_ws2_fp32_pg2/checkpoint/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt");
  ds::Field root(f->root, f->path());
  const pt::Tensor& t = root["optimizer_state_dict"]["fp32_flat_groups"][0].as_tensor();
  ASSERT_NE(t.attrs, nullptr);
  ASSERT_NE(t.attrs->get("ds_id"), nullptr);
  EXPECT_TRUE(t.requires_grad);
}

TEST(PtReader, EnumInBothPicklingForms) {
  pt::Arena a;
  const std::string file = "enum-test";
  auto none = [](const std::string&, uint64_t) -> uint64_t { throw std::runtime_error("no storages"); };
  // REDUCE(ZeroStageEnum, (2,)) as CPython 3.8-3.13 write it.
  const std::string by_value =
      "\x80\x02"
      "cdeepspeed.runtime.zero.config\nZeroStageEnum\nK\x02\x85R."s;
  // REDUCE(getattr, (ZeroStageEnum, 'weights')) as Debian's CPython 3.11.2 writes it.
  const std::string by_name =
      "\x80\x02"
      "c__builtin__\ngetattr\ncdeepspeed.runtime.zero.config\nZeroStageEnum\nX\x07\x00\x00\x00weights\x86R."s;
  EXPECT_EQ(ds::Field(pt::decode_pickle(by_value, a, file, none), file).as_int(), 2);
  EXPECT_EQ(ds::Field(pt::decode_pickle(by_name, a, file, none), file).as_int(), 3);
}

TEST(PtReader, Protocol4Opcodes) {
  pt::Arena a;
  auto none = [](const std::string&, uint64_t) -> uint64_t { return 0; };
  // FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL, EMPTY_SET, ADDITEMS, BINGET, LONG1, BINFLOAT.
  std::string p = "\x80\x04\x95"s;
  p += "\x20\x00\x00\x00\x00\x00\x00\x00"s;
  p += "}\x94(\x8c\x01s\x94\x8f\x94(K\x01K\x02\x90\x8c\x01g\x94h\x01\x8a\x02\xff\x7f"
       "G\x3f\xf8\x00\x00\x00\x00\x00\x00"
       "\x87u."s;
  const pt::Node* n = pt::decode_pickle(p, a, "p4", none);
  ASSERT_EQ(n->kind, pt::Kind::Dict);
  ASSERT_EQ(n->entries.size(), 2u);
  EXPECT_EQ(n->get("s")->kind, pt::Kind::Set);
  EXPECT_EQ(n->get("s")->items.size(), 2u);
  const pt::Node* t = n->get("g");
  ASSERT_EQ(t->kind, pt::Kind::Tuple);
  EXPECT_EQ(t->items[0]->s, "s");  // the memoized key, fetched again
  EXPECT_EQ(t->items[1]->i, 32767);
  EXPECT_EQ(t->items[2]->f, 1.5);
}

TEST(PtReader, LegacyFormatIsNamed) {
  const std::string dir = temp_dir();
  write_file(dir + "/old.pt", std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15));
  try {
    pt::load_pt(dir + "/old.pt");
    FAIL() << "legacy file accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("legacy torch.save format is not supported"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("old.pt"), std::string::npos);
  }
}

// A file that is not a torch.save archive is named for what it is, not taken for an old .pt.
TEST(PtReader, OtherFormatsAreNamed) {
  const std::string dir = temp_dir();
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string safetensors(8, '\0');
  safetensors[0] = char(header.size());
  write_file(dir + "/model.safetensors", safetensors + header + std::string(4, '\0'));
  write_file(dir + "/w.npy", std::string("\x93NUMPY\x01\x00v\x00", 10) + "{'descr': '<f4'}");
  write_file(dir + "/notes.txt", "step 1200: loss 2.1\n");
  const std::pair<const char*, const char*> cases[] = {
      {"model.safetensors", "model.safetensors: a safetensors file, not a torch.save (.pt) file"},
      {"w.npy", "w.npy: a numpy .npy file, not a torch.save (.pt) file"},
      {"notes.txt", "notes.txt: not a torch.save (.pt) file: not a zip archive"}};
  for (const auto& [name, said] : cases) {
    try {
      pt::load_pt(dir + "/" + name);
      ADD_FAILURE() << name << " accepted";
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()), dir + "/" + said);
    }
  }
}

// The dict index (issue 29) against a scan with Python's rule (the last key set wins), on random
// dicts of every size around the index threshold, with duplicate and mixed-kind keys, and with
// entries appended after the first lookup built the index.
TEST(PtValue, DictIndexAgreesWithLinearLookup) {
  std::mt19937 rng(29);
  auto linear_str = [](const pt::Node& d, const std::string& key) -> const pt::Node* {
    const pt::Node* found = nullptr;
    for (const auto& [k, v] : d.entries)
      if (k->kind == pt::Kind::Str && k->s == key) found = v;
    return found;
  };
  auto linear_int = [](const pt::Node& d, int64_t key) -> const pt::Node* {
    const pt::Node* found = nullptr;
    for (const auto& [k, v] : d.entries)
      if (k->kind == pt::Kind::Int && k->i == key) found = v;
    return found;
  };
  for (int round = 0; round < 200; ++round) {
    pt::Arena a;
    pt::Node* d = a.make(pt::Kind::Dict);
    const int n = int(rng() % 64), space = 1 + int(rng() % 48);
    auto add = [&] {
      const int key = int(rng() % space);
      pt::Node* k = rng() % 2 ? a.make_str("k" + std::to_string(key)) : a.make_int(key);
      d->entries.emplace_back(k, a.make_int(int64_t(rng())));
    };
    for (int i = 0; i < n; ++i) add();
    auto check = [&] {
      for (int key = -1; key <= space; ++key) {
        EXPECT_EQ(d->get("k" + std::to_string(key)), linear_str(*d, "k" + std::to_string(key)));
        EXPECT_EQ(d->get(int64_t(key)), linear_int(*d, key));
      }
    };
    check();
    for (int i = 0; i < 5; ++i) add();  // a tree still being built after its first lookup
    check();
  }
}

}  // namespace
}  // namespace zm::test
