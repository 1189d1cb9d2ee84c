// layouts/<target>/ built through the View without mounting: (1) each fake equals the real native
// checkpoint DeepSpeed saved at that target (tests/fixtures/*/resaved), key by key, with only the
// differences of spec fake-layouts.md §7.1; (2) a fake indexed back equals its source, tensor for
// tensor; and the names: invalid spellings are absent, the listing shows README, own, presets.
#include <fcntl.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/model_file.h"
#include "zeromount/ds/target_layout.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/export.h"
#include "zeromount/view/files/layout_files.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;
using pt::Kind;
using pt::Node;
using view::Inode;
using view::View;

const std::string kTag = "global_step3";

// The number right after the last `key` in a pickle path, and what follows it (`.../state/3/exp_avg`
// after "state/": 3 and "/exp_avg"). Plain string work: <regex> costs this file 12 s to compile.
std::optional<std::pair<uint64_t, std::string_view>> number_after(std::string_view s, std::string_view key) {
  const size_t at = s.rfind(key);
  if (at == std::string_view::npos) return std::nullopt;
  size_t i = at + key.size(), j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j == i) return std::nullopt;
  return std::pair{std::stoull(std::string(s.substr(i, j - i))), s.substr(j)};
}

// ---- Spec §7.1: the only differences a fake may have from a real native save at the target ----
struct Allowed {
  // SRC's ds_config and ds_version (a resaved ds_config says load_universal); stale global_samples.
  static bool skipped(std::string_view key) {
    return key == "ds_config" || key == "ds_version" || key == "global_samples";
  }
  // The loss scaler, when the precision changes.
  bool scaler = false;
  static bool scaler_key(std::string_view key) { return key == "loss_scaler" || key == "dynamic_loss_scale"; }
  // The order of the state keys of one group (a universal load fills them from a Python set).
  static bool unordered(const std::string& path) {
    for (const char* key : {"base_optimizer_state/state/", "optimizer_state_dict/state/"})
      if (const auto n = number_after(path, key); n && n->second.empty()) return true;
    return false;
  }
  // ZeRO-3 padding contents (compared on the valid elements only) and the ds_id attribute.
  bool zero3 = false;
};

std::vector<uint64_t> size_numels(const Node* shapes) {  // an OrderedDict name -> torch.Size
  std::vector<uint64_t> out;
  for (const auto& [k, v] : shapes->entries) {
    // torch.Size((d0, d1, ...)): the product of the ints inside, however the reader nests them.
    uint64_t n = 1;
    std::vector<const Node*> todo{v};
    while (!todo.empty()) {
      const Node* x = todo.back();
      todo.pop_back();
      if (x->kind == Kind::Int) n *= uint64_t(x->i);
      if (x->kind == Kind::Object && x->args) todo.push_back(x->args);
      if (x->kind == Kind::Tuple || x->kind == Kind::List)
        for (const Node* d : x->items) todo.push_back(d);
    }
    out.push_back(n);
  }
  return out;
}

// Which elements of rank r's ZeRO-3 tensors are real, read from the REAL files' shapes.
struct Zero3Valid {
  std::vector<std::vector<bool>> sub_groups;  // per sub-group, per flat element
  std::map<std::string, uint64_t> frozen;     // name -> numel
  uint32_t rank = 0, world = 1;
  static Zero3Valid read(const std::string& real_dir, uint32_t rank, uint32_t world) {
    Zero3Valid z;
    z.rank = rank;
    z.world = world;
    auto model = pt::load_pt(real_dir + "/zero_pp_rank_" + std::to_string(rank) + "_mp_rank_00_model_states.pt");
    for (const Node* shapes : model->root->get("param_shapes")->items) {
      std::vector<bool> m;
      for (uint64_t n : size_numels(shapes)) {
        const uint64_t part = (n + world - 1) / world;
        for (uint64_t i = 0; i < part; ++i) m.push_back(part * rank + i < n);
      }
      z.sub_groups.push_back(std::move(m));
    }
    if (const Node* f = model->root->get("frozen_param_shapes"); f && f->kind == Kind::Dict) {
      auto numels = size_numels(f);
      for (size_t k = 0; k < numels.size(); ++k) z.frozen[f->entries[k].first->s] = numels[k];
    }
    return z;
  }
  // nullopt: every element counts.
  std::optional<std::vector<bool>> mask(const std::string& path, uint64_t numel) const {
    // fp32_flat_groups/<g>, optimizer_state_dict/state/<g>/<key>: sub-group g's valid elements.
    const auto flat = number_after(path, "fp32_flat_groups/");
    const auto state = number_after(path, "optimizer_state_dict/state/");
    const auto is_key = [](std::string_view rest) {
      return rest.size() > 1 && rest[0] == '/' &&
             std::all_of(rest.begin() + 1, rest.end(), [](char c) { return std::isalnum(c) || c == '_'; });
    };
    if (flat && flat->second.empty()) return sub_groups.at(flat->first);
    if (numel > 1 && state && is_key(state->second)) return sub_groups.at(state->first);
    constexpr std::string_view kFrozen = "frozen_param_fragments/";
    if (const size_t at = path.rfind(kFrozen); at != std::string::npos && at + kFrozen.size() < path.size()) {
      const std::string name = path.substr(at + kFrozen.size());
      std::vector<bool> v(numel);
      for (uint64_t i = 0; i < numel; ++i) v[i] = rank * numel + i < frozen.at(name);
      return v;
    }
    return std::nullopt;
  }
};

class Comparer {
 public:
  Comparer(const pt::PtFile& ours, const pt::PtFile& real, Allowed allowed, const Zero3Valid* z3)
      : ours_(ours), real_(real), allowed_(allowed), z3_(z3) {}

  void compare(const Node* a, const Node* b, const std::string& path) {
    ASSERT_TRUE(a && b) << path;
    ASSERT_EQ(a->kind, b->kind) << path << ": " << a->kind_name() << " vs " << b->kind_name();
    switch (b->kind) {
      case Kind::None:
        return;
      case Kind::Bool:
        EXPECT_EQ(a->b, b->b) << path;
        return;
      case Kind::Int:
        EXPECT_EQ(a->i, b->i) << path;
        return;
      case Kind::Float:
        EXPECT_EQ(a->f, b->f) << path;
        return;
      case Kind::Str:
      case Kind::Bytes:
      case Kind::BigInt:
        EXPECT_EQ(a->s, b->s) << path;
        return;
      case Kind::Global:
        EXPECT_EQ(a->s + "." + a->s2, b->s + "." + b->s2) << path;
        return;
      case Kind::List:
      case Kind::Tuple:
      case Kind::Set:
        ASSERT_EQ(a->items.size(), b->items.size()) << path;
        for (size_t k = 0; k < b->items.size(); ++k) compare(a->items[k], b->items[k], path + "/" + std::to_string(k));
        return;
      case Kind::Dict:
        EXPECT_EQ(a->b, b->b) << path << ": OrderedDict or dict";
        compare_entries(a, b, path);
        if (b->state) compare(a->state, b->state, path + "/_metadata");
        return;
      case Kind::Object:
        EXPECT_EQ(a->how, b->how) << path;
        compare(a->callee, b->callee, path + "/class");
        if (b->args || a->args) compare(a->args ? a->args : &kEmpty, b->args ? b->args : &kEmpty, path + "/args");
        if (b->state) compare(a->state, b->state, path + "/state");
        return;
      case Kind::Tensor:
        return compare_tensor(*a->tensor, *b->tensor, path);
      case Kind::Storage:
        FAIL() << path << ": bare storage";
    }
  }

 private:
  static std::string key_text(const Node* k) { return k->kind == Kind::Int ? std::to_string(k->i) : k->s; }
  void compare_entries(const Node* a, const Node* b, const std::string& path) {
    std::vector<std::string> ka, kb;
    for (const auto& e : a->entries) ka.push_back(key_text(e.first));
    for (const auto& e : b->entries) kb.push_back(key_text(e.first));
    if (Allowed::unordered(path)) {
      std::sort(ka.begin(), ka.end());
      std::sort(kb.begin(), kb.end());
    }
    ASSERT_EQ(ka, kb) << path;
    for (const auto& [k, v] : b->entries) {
      const std::string key = key_text(k);
      if (Allowed::skipped(key) || (allowed_.scaler && Allowed::scaler_key(key))) continue;
      const Node* mine = k->kind == Kind::Int ? a->get(k->i) : a->get(key);
      compare(mine, v, path + "/" + key);
    }
  }
  void compare_tensor(const pt::Tensor& a, const pt::Tensor& b, const std::string& path) {
    EXPECT_EQ(a.dtype, b.dtype) << path;
    ASSERT_EQ(a.shape, b.shape) << path;
    EXPECT_EQ(a.requires_grad, b.requires_grad) << path;
    if (!allowed_.zero3) {
      EXPECT_EQ(a.attrs != nullptr, b.attrs != nullptr) << path;  // ds_id
    }
    // Storage sharing: views of one storage in the real file are views of one storage here.
    EXPECT_EQ(a.storage_offset, b.storage_offset) << path;
    const pt::StorageRecord &ra = a.record(), &rb = b.record();
    EXPECT_EQ(ra.numel, rb.numel) << path;
    auto [ia, fa] = storage_pairs_.try_emplace(ra.key, rb.key);
    auto [ib, fb] = storage_pairs_back_.try_emplace(rb.key, ra.key);
    EXPECT_TRUE(ia->second == rb.key && ib->second == ra.key) << path << ": storage sharing differs";
    const std::string va = tensor_bytes(ours_, a), vb = tensor_bytes(real_, b);
    ASSERT_EQ(va.size(), vb.size()) << path;
    const auto mask = z3_ ? z3_->mask(path, a.numel()) : std::nullopt;
    if (!mask) {
      EXPECT_TRUE(va == vb) << path << ": values differ";
      return;
    }
    ASSERT_EQ(mask->size(), a.numel()) << path;
    const size_t es = pt::element_size(a.dtype);
    for (size_t i = 0; i < mask->size(); ++i)
      if ((*mask)[i] && va.compare(i * es, es, vb, i * es, es) != 0) {
        ADD_FAILURE() << path << ": element " << i << " differs";
        return;
      }
  }
  static inline const Node kEmpty = [] {
    Node n;
    n.kind = Kind::Tuple;
    return n;
  }();
  const pt::PtFile& ours_;
  const pt::PtFile& real_;
  Allowed allowed_;
  const Zero3Valid* z3_;
  std::map<std::string, std::string> storage_pairs_, storage_pairs_back_;
};

// A real native save at `target`: resaved/<target>/ (DeepSpeed re-saved the state there), or the
// source's own checkpoint/ when `target` is its own layout.
struct Resaved {
  std::string fixture, target;
  bool own = false;
  std::string tag() const { return fixture_latest(fixture); }
  std::string real_dir() const {
    return kFixtures + "/" + fixture + "/" + (own ? "checkpoint" : "resaved/" + target) + "/" + tag();
  }
};
const std::vector<Resaved> kResaved = {
    {"z2_ws2_fp32_pg2", "zero1-dp3-fp32"},
    {"z3_ws2_fp32_pg2", "zero1-dp2-fp32"},
    {"z1_ws2_fp32_pg2", "zero2-dp2-bf16"},
    {"z1_ws2_bf16_pg2_fp32acc", "zero2-dp4-bf16"},
    {"z3_ws2_fp32_pg2_sg200", "zero2-dp4-fp32"},
    {"z2_ws2_bf16_pg2", "bf16opt-dp2"},
    {"z2_ws2_fp32_pg2", "zero3-dp4-fp32"},
    {"z2_ws2_bf16_pg2", "zero3-dp4-bf16"},
    {"z2_ws2_fp16_pg2", "zero3-dp2-fp16"},
    {"z3_ws2_fp32_pg2_sg200", "zero3-dp3-fp32-sg200"},
    // Each fixture's own layout (the listed self-check) against its own files: tensor-equal, with
    // ZeRO-3 ranks' own buffers, round robin, no state before the first step, per-group values
    // other than 'step', and the elastic form.
    {"z1_ws2_fp32_pg2", "zero1-dp2-fp32", true},
    {"z2_ws2_fp32_pg2", "zero2-dp2-fp32", true},
    {"z3_ws2_fp32_pg2", "zero3-dp2-fp32", true},
    {"z3_ws2_fp32_pg2_sg200", "zero3-dp2-fp32-sg200", true},
    {"z1_ws2_bf16_pg2_fp32acc", "bf16opt-dp2", true},
    {"z2_ws2_bf16_pg2", "zero2-dp2-bf16", true},
    {"z3_ws2_bf16_pg2", "zero3-dp2-bf16", true},
    {"z2_ws2_fp16_pg2", "zero2-dp2-fp16", true},
    {"z1_ws2_fp32_pg2_rr", "zero1-dp2-fp32-rr", true},
    {"z1_ws2_fp32_pg2_steps0", "zero1-dp2-fp32", true},
    {"z2_ws2_fp32_pg2_steps0", "zero2-dp2-fp32", true},
    {"z3_ws2_fp32_pg2_steps0", "zero3-dp2-fp32", true},
    {"z2_ws2_fp32_pg2_hybrid", "zero2-dp2-fp32", true},
    {"z3_ws2_fp32_pg2_hybrid", "zero3-dp2-fp32", true},
    {"z2_ws2_fp32_pg2_elastic", "zero2-dp2-fp32", true},
    {"z2_ws2_fp32_pg2_elastic_fusedadam", "zero2-dp2-fp32", true},
};

void PrintTo(const Resaved& r, std::ostream* os) {
  *os << r.fixture << " as " << r.target << (r.own ? " (its own layout)" : "");
}

class FakeEqualsResaved : public ::testing::TestWithParam<Resaved> {};

TEST_P(FakeEqualsResaved, KeyByKey) {
  const Resaved& c = GetParam();
  auto v = View::load(kFixtures + "/" + c.fixture + "/checkpoint");
  const std::string real_dir = c.real_dir();
  if (c.own) {
    EXPECT_NE(content_of(*v, *find(*v, "/layouts/README")).find("own layout: " + c.target), std::string::npos);
  }
  const Inode* tag = find(*v, "/layouts/" + c.target + "/" + c.tag());
  ASSERT_NE(tag, nullptr);
  auto names = listing(*v, *tag);
  std::vector<std::string> real_names;
  for (const auto& e : fs::directory_iterator(real_dir)) real_names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  std::sort(real_names.begin(), real_names.end());
  ASSERT_EQ(names, real_names) << "exactly the target's files";
  EXPECT_EQ(content_of(*v, *find(*v, "/layouts/" + c.target + "/latest")),
            read_file(kFixtures + "/" + c.fixture + "/checkpoint/latest"));

  const auto target = ds::parse_target(c.target);
  ASSERT_TRUE(target);
  const auto src_index = ds::index_tag(kFixtures + "/" + c.fixture + "/checkpoint/" + c.tag());
  Allowed allowed;
  allowed.scaler = ds::source_layout(*src_index).precision != target->precision;
  allowed.zero3 = target->stage == ds::TargetStage::Zero3;
  const std::string dir = temp_dir();
  for (const std::string& name : real_names) {
    SCOPED_TRACE(c.fixture + " as " + c.target + ": " + name);
    const Inode* n = v->lookup(tag->ino, name);
    ASSERT_NE(n, nullptr);
    const std::string bytes = content_of(*v, *n);
    EXPECT_EQ(uint64_t(v->attr(*n).st_size), bytes.size()) << "size known at stat";
    write_file(dir + "/" + name, bytes);
    auto ours = pt::load_pt(dir + "/" + name);
    auto real = pt::load_pt(real_dir + "/" + name);
    EXPECT_EQ(ours->prefix, real->prefix);
    std::optional<Zero3Valid> z3;
    if (const auto r = number_after(name, "zero_pp_rank_"); allowed.zero3 && r && r->second.starts_with("_"))
      z3 = Zero3Valid::read(real_dir, uint32_t(r->first), target->dp);
    Comparer(*ours, *real, allowed, z3 ? &*z3 : nullptr).compare(ours->root, real->root, name);
  }
}

INSTANTIATE_TEST_SUITE_P(Resaved, FakeEqualsResaved, ::testing::ValuesIn(kResaved), [](const auto& info) {
  std::string s = info.param.fixture + "_" + info.param.target + (info.param.own ? "_own" : "");
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

// The comparison is not vacuous: another rank's real file differs in values, under the masks.
TEST(LayoutsView, TheComparerSeesAWrongRank) {
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint");
  const std::string real_dir = kFixtures + "/z2_ws2_fp32_pg2/resaved/zero3-dp4-fp32/" + kTag;
  const std::string name = "zero_pp_rank_1_mp_rank_00_optim_states.pt";
  const std::string path = temp_dir() + "/" + name;
  write_file(path, content_of(*v, *find(*v, "/layouts/zero3-dp4-fp32/" + kTag + "/" + name)));
  auto ours = pt::load_pt(path);
  auto wrong = pt::load_pt(real_dir + "/zero_pp_rank_2_mp_rank_00_optim_states.pt");
  const Zero3Valid z3 = Zero3Valid::read(real_dir, 1, 4);
  Allowed allowed;
  allowed.zero3 = true;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter catcher(&failures);
    Comparer(*ours, *wrong, allowed, &z3).compare(ours->root, wrong->root, name);
  }
  ASSERT_GT(failures.size(), 0);
  EXPECT_NE(std::string(failures.GetTestPartResult(0).message()).find("differs"), std::string::npos);
}

}  // namespace
}  // namespace zm::test
