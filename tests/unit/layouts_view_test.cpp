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

// The DP fixtures: every stage and precision the index supports.
const std::vector<std::string> kSources = {"z1_ws2_fp32_pg2",       "z2_ws2_fp32_pg2",         "z3_ws2_fp32_pg2",
                                           "z3_ws2_fp32_pg2_sg200", "z1_ws2_bf16_pg2_fp32acc", "z2_ws2_bf16_pg2",
                                           "z3_ws2_bf16_pg2",       "z2_ws2_fp16_pg2"};

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

std::vector<std::string> listing(const View& v, const Inode& dir) {
  std::vector<std::string> names;
  for (auto e = v.dir_entry(dir, 2); e; e = v.dir_entry(dir, e->next)) names.emplace_back(e->name);
  return names;
}

// A real native save at `target`: resaved/<target>/ (DeepSpeed re-saved the state there), or the
// source's own checkpoint/ when `target` is its own layout.
struct Resaved {
  std::string fixture, target;
  bool own = false;
  std::string tag() const {  // what `latest` names
    const std::string t = read_file(kFixtures + "/" + fixture + "/checkpoint/latest");
    return t.substr(0, t.find_last_not_of(" \n") + 1);
  }
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

// Issue 29: the plans of one tag share one decoded model-state pickle, not one copy each.
TEST(LayoutsView, PlansOfOneTagShareOneDecodedSource) {
  auto v = View::load(kFixtures + "/z3_ws2_fp32_pg2/checkpoint");
  const uint64_t before = view::layout_source_decodes();
  for (int w = 2; w <= 9; ++w) {
    const std::string target = "/layouts/zero3-dp" + std::to_string(w) + "-fp32/" + kTag;
    const Inode* dir = find(*v, target);
    ASSERT_NE(dir, nullptr) << target;
    EXPECT_FALSE(listing(*v, *dir).empty());
  }
  EXPECT_EQ(view::layout_source_decodes() - before, 1u) << "8 plans, one decoded source";
}

// Issue 29: .zeromount/stats says what the kept plans weigh, and a plan weighs its partition
// vectors: at least the indices and offsets each parameter needs in them (4 + 8 bytes per entry),
// at most twice that plus a fixed part (no copy of names or of the source's pickle). Counted from
// the index here, not from the plan.
TEST(LayoutsView, StatsWeighTheKeptPlansByTheirPartitionVectors) {
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint");
  const auto stat = [&](const std::string& key) {
    const std::string text = content_of(*v, *find(*v, "/.zeromount/stats"));
    const size_t at = text.find("\n" + key + " ");
    EXPECT_NE(at, std::string::npos) << key << " in " << text;
    return std::stoull(text.substr(at + key.size() + 2));
  };
  const uint64_t kept0 = stat("plans_kept"), bytes0 = stat("plan_bytes");
  ASSERT_NE(find(*v, "/layouts/zero2-dp3-fp32/" + kTag), nullptr);
  ASSERT_NE(find(*v, "/layouts/zero3-dp5-fp32/" + kTag), nullptr);
  const uint64_t n = ds::index_tag(kFixtures + "/z2_ws2_fp32_pg2/checkpoint/" + kTag)->params.size();
  // Two plans; ZeRO-2: params and flat (4 bytes), offsets and flat_offsets (8) per parameter;
  // ZeRO-3: params (4) and offsets (8) per parameter, and its id in group_sub_groups (4).
  const uint64_t vectors = n * 24 + n * 16, least = 2 * sizeof(view::LayoutTag) + vectors;
  EXPECT_EQ(stat("plans_kept") - kept0, 2u);
  EXPECT_GE(stat("plan_bytes") - bytes0, least);
  EXPECT_LE(stat("plan_bytes") - bytes0, least + vectors + 2 * 1024) << "a plan keeps no copy of names or pickles";
}

// The plans keep a skeleton of the source's model-state pickle, not the decoded tree: every key
// of the root in order, the module's names in order (views of the index's), its _metadata, and
// none of the per-parameter values the target remakes.
TEST(LayoutsView, ASkeletonKeepsTheModulesNamesNotItsTensors) {
  const auto ix = ds::index_tag(kFixtures + "/z3_ws2_fp32_pg2/checkpoint/" + kTag);
  const auto decoded = pt::load_pt(ix->model_files.at(0));
  const auto sk = ds::model_skeleton(*ix, ix->frozen, decoded->root);
  EXPECT_EQ(sk->refusal, "");
  const Node* module = decoded->root->get("module");
  ASSERT_NE(module, nullptr);
  ASSERT_EQ(sk->module_keys.size(), module->entries.size());
  for (size_t k = 0; k < module->entries.size(); ++k) EXPECT_EQ(sk->module_keys[k], module->entries[k].first->s);
  ASSERT_NE(sk->module_metadata, nullptr) << "the module's _metadata is kept";
  EXPECT_EQ(pt::repr(sk->module_metadata, 8), pt::repr(module->state, 8));
  ASSERT_EQ(sk->root->entries.size(), decoded->root->entries.size());
  for (size_t k = 0; k < sk->root->entries.size(); ++k) {
    const std::string key = sk->root->entries[k].first->s;
    EXPECT_EQ(key, decoded->root->entries[k].first->s);
    const Node* value = sk->root->entries[k].second;
    if (key == "module" || key == "param_shapes" || key.starts_with("frozen_param_"))
      EXPECT_EQ(value->kind, Kind::None) << key << " is remade by the target, not kept";
    else
      EXPECT_EQ(pt::repr(value, 8), pt::repr(decoded->root->entries[k].second, 8)) << key;
  }
  std::set<const char*> index_names;  // a kept name is the index's own string, not a copy
  for (const auto& p : ix->params) index_names.insert(p.name.data());
  for (const auto& b : ix->buffers) index_names.insert(b.name.data());
  for (const auto& f : ix->frozen) index_names.insert(f.name.data());
  for (const auto& [alias, canonical] : ix->shared) index_names.insert(alias.data());
  for (std::string_view name : sk->module_keys) EXPECT_TRUE(index_names.count(name.data())) << name;

  Node* odd = const_cast<Node*>(module);  // a module entry no target can present refuses them all
  pt::Arena a;
  odd->entries.emplace_back(a.make_str("not.in.the.index"), a.make_int(1));
  const auto refused = ds::model_skeleton(*ix, ix->frozen, decoded->root);
  EXPECT_NE(refused->refusal.find("'not.in.the.index'"), std::string::npos) << refused->refusal;
  EXPECT_TRUE(refused->module_keys.empty());
}

TEST(LayoutsView, NamesListingAndPresets) {
  view::ViewOptions o;
  o.layout_presets = {"zero3-dp64-bf16", "zero2-dp2-fp32", "zero1-dp3-fp32"};
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint", o);
  const Inode* root = find(*v, "/layouts");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(listing(*v, *root),
            (std::vector<std::string>{"README", "zero2-dp2-fp32", "zero3-dp64-bf16", "zero1-dp3-fp32"}))
      << "README, the own layout (a self-check), then the presets once each";
  for (const char* bad : {"zero3-dp064-bf16", "zero3-dp0-fp32", "zero3-dp65537-fp32", "ZERO3-dp4-fp32",
                          "zero3-dp4-fp32-rr", "zero2-dp4-fp32-sg7", "zero3-dp4-fp32-sg1000000000", "bf16opt-dp4-bf16",
                          "zero3-dp4", "zero3-dp4-fp32 ", "zero4-dp4-fp32", "README2"})
    EXPECT_EQ(v->lookup(root->ino, bad), nullptr) << bad;
  const Inode* big = v->lookup(root->ino, "zero3-dp65536-bf16");
  ASSERT_NE(big, nullptr) << "any valid name resolves on lookup";
  EXPECT_EQ(v->lookup(root->ino, "zero3-dp65536-bf16"), big) << "and keeps its inode";
  EXPECT_EQ(listing(*v, *root).size(), 4u) << "looked-up names are not listed";
  const size_t nodes = v->tree().size();
  const Inode* tag = v->lookup(big->ino, kTag);
  ASSERT_NE(tag, nullptr);
  EXPECT_LE(v->tree().size(), nodes + 1) << "rank files are made on lookup, not with the target";
  const Inode* last = v->lookup(tag->ino, "bf16_zero_pp_rank_65535_mp_rank_00_optim_states.pt");
  ASSERT_NE(last, nullptr);
  EXPECT_GT(v->attr(*last).st_size, 0);
  EXPECT_EQ(v->lookup(tag->ino, "bf16_zero_pp_rank_65536_mp_rank_00_optim_states.pt"), nullptr);
  EXPECT_EQ(v->lookup(tag->ino, "zero_pp_rank_0_mp_rank_00_optim_states.pt"), nullptr) << "bf16 files are prefixed";
  EXPECT_EQ(v->lookup(tag->ino, "bf16_zero_pp_rank_01_mp_rank_00_optim_states.pt"), nullptr);
  EXPECT_EQ(v->lookup(tag->ino, "mp_rank_00_model_states.pt"), nullptr) << "ZeRO-3 has per-rank model files";
  const std::string readme = content_of(*v, *find(*v, "/layouts/README"));
  EXPECT_NE(readme.find("own layout: zero2-dp2-fp32"), std::string::npos);
  EXPECT_NE(readme.find("tensor-equal to the real files"), std::string::npos) << readme;
  EXPECT_NE(readme.find("not byte-equal"), std::string::npos) << readme;
  EXPECT_EQ(readme.find("issue"), std::string::npos) << "the text a user reads cites no tracker number";
}

TEST(LayoutsView, RenamedFolderAndRefusedPresets) {
  view::ViewOptions o;
  o.layouts_dir = "fakes";
  o.layout_presets = {"nonsense"};
  EXPECT_THROW(View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint", o), Error) << "an invalid preset is refused";
  o.layout_presets = {};
  auto v = View::load(kFixtures + "/z2_ws2_fp32_pg2/checkpoint", o);
  EXPECT_EQ(find(*v, "/layouts"), nullptr);
  EXPECT_NE(find(*v, "/fakes/zero1-dp7-fp32/" + kTag + "/zero_pp_rank_6_mp_rank_00_optim_states.pt"), nullptr);
}

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

TEST(LayoutsView, ARealLayoutsFolderWins) {
  const std::string src = temp_dir() + "/ckpt";
  copy_fixture("z2_ws2_fp32_pg2/checkpoint", src);
  fs::create_directory(src + "/layouts");
  write_file(src + "/layouts/mine.txt", "real");
  auto v = View::load(src);
  const Inode* real = find(*v, "/layouts");
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(real->made_by, nullptr);
  EXPECT_EQ(listing(*v, *real), std::vector<std::string>{"mine.txt"});
  EXPECT_EQ(v->lookup(real->ino, "zero3-dp4-fp32"), nullptr) << "the real folder is shown as is";
  view::ViewOptions o;
  o.layouts_dir = "fakes";
  auto w = View::load(src, o);
  EXPECT_NE(find(*w, "/fakes/zero3-dp4-fp32/" + kTag), nullptr) << "-o layouts_dir=NAME picks another name";
}

// ---- (2) round trip: a fake, indexed back by our own indexer, equals its source ----

// The first n bytes of `extents`.
std::string extent_bytes(const ds::TagIndex& ix, const std::vector<pt::Extent>& extents, uint64_t n) {
  return test::extent_bytes(ix, extents).substr(0, n);
}

void expect_same_state(const ds::TagIndex& src, const ds::TagIndex& fake, const std::string& what) {
  ASSERT_EQ(fake.params.size(), src.params.size()) << what;
  EXPECT_EQ(fake.state_names, src.state_names) << what;
  EXPECT_EQ(fake.num_groups, src.num_groups) << what;
  for (const ds::Param& p : src.params) {
    const ds::Param* q = fake.find(p.name);
    ASSERT_NE(q, nullptr) << what << ": " << p.name;
    EXPECT_EQ(q->shape, p.shape) << what << ": " << p.name;
    EXPECT_EQ(q->group, p.group) << what << ": " << p.name;
    for (size_t k = 0; k < src.state_names.size(); ++k) {
      EXPECT_TRUE(fragment_bytes(fake, *q, k) == fragment_bytes(src, p, k))
          << what << ": " << p.name << " " << src.state_names[k];
    }
    EXPECT_EQ(fake.scalar_names, src.scalar_names) << what;
    const auto &a = src.scalars.at(size_t(p.step)), &b = fake.scalars.at(size_t(q->step));
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].kind, b[k].kind) << what << ": " << src.scalar_names[k];
      EXPECT_EQ(a[k].shape, b[k].shape) << what << ": " << src.scalar_names[k];
      EXPECT_EQ(a[k].i, b[k].i) << what << ": " << src.scalar_names[k];
      const uint64_t n = a[k].extent.length;
      if (a[k].kind == ds::StepValue::Tensor) {
        EXPECT_EQ(extent_bytes(src, {a[k].extent}, n), extent_bytes(fake, {b[k].extent}, n))
            << what << ": " << src.scalar_names[k];
      }
    }
  }
  ASSERT_EQ(fake.buffers.size(), src.buffers.size()) << what;
  for (size_t k = 0; k < src.buffers.size(); ++k) {
    const uint64_t n = src.buffers[k].numel() * pt::element_size(src.buffers[k].dtype);
    EXPECT_EQ(fake.buffers[k].name, src.buffers[k].name) << what;
    EXPECT_TRUE(extent_bytes(fake, fake.buffers[k].data, n) == extent_bytes(src, src.buffers[k].data, n)) << what;
  }
}

// Issue 19's real sources: round robin, saves before the first step, per-group values other than
// 'step' (integer_step, a shape-[1] tensor_step), elastic saves (torch AdamW and FusedAdam).
const std::vector<std::string> kEdgeSources = {
    "z1_ws2_fp32_pg2_rr",     "z1_ws2_fp32_pg2_steps0", "z2_ws2_fp32_pg2_steps0",  "z3_ws2_fp32_pg2_steps0",
    "z2_ws2_fp32_pg2_hybrid", "z3_ws2_fp32_pg2_hybrid", "z2_ws2_fp32_pg2_elastic", "z2_ws2_fp32_pg2_elastic_fusedadam"};

TEST(LayoutsRoundTrip, EveryFixtureIntoEveryStageAtDp1_3_8_64) {
  // One precision per stage, so that every conversion is crossed; masters stay fp32 in all.
  const std::vector<std::string> stages = {"zero1-dp{}-fp32", "zero2-dp{}-bf16", "zero3-dp{}-fp16", "bf16opt-dp{}"};
  std::vector<std::string> sources = kSources;
  sources.insert(sources.end(), kEdgeSources.begin(), kEdgeSources.end());
  for (const std::string& fixture : sources) {
    auto v = View::load(kFixtures + "/" + fixture + "/checkpoint");
    const std::string tag = Resaved{fixture, ""}.tag();
    const auto src = ds::index_tag(kFixtures + "/" + fixture + "/checkpoint/" + tag);
    for (const std::string& pattern : stages)
      for (int dp : {1, 3, 8, 64}) {
        std::string name = pattern;
        name.replace(name.find("{}"), 2, std::to_string(dp));
        const std::string what = fixture + " as " + name;
        const std::string out = temp_dir() + "/" + name;
        view::ExportOptions o;
        o.what = "layouts";
        o.below = name;
        if (src->elastic && (name.starts_with("zero3") || name.starts_with("bf16opt"))) {
          EXPECT_EQ(v->lookup(find(*v, "/layouts")->ino, name), nullptr) << what << ": refused";
          continue;  // the rigid form needs the hyper-parameters an elastic save lacks
        }
        ASSERT_NO_THROW(view::export_view(*v, out, o)) << what;
        std::unique_ptr<ds::TagIndex> fake;
        ASSERT_NO_THROW(fake = ds::index_tag(out + "/" + tag)) << what;
        EXPECT_EQ(fake->elastic, src->elastic) << what << ": an elastic source is faked in its form";
        EXPECT_EQ(fake->dp, dp) << what;
        if (name.starts_with("bf16opt")) {
          EXPECT_TRUE(fake->bf16_optimizer) << what;
        } else {
          EXPECT_EQ(fake->stage, name[4] - '0') << what;
        }
        // The fake carries SRC's ds_config (spec §2.1), so it names itself only at SRC's precision
        // and round robin.
        const auto target = ds::parse_target(name);
        const ds::TargetLayout own = ds::source_layout(*src);
        if (target->precision == own.precision && target->round_robin == own.round_robin) {
          EXPECT_EQ(ds::target_name(ds::source_layout(*fake)), name) << what << ": the fake names itself";
        }
        expect_same_state(*src, *fake, what);
        fs::remove_all(out);
      }
  }
}

// ZeRO-3 rank files are sized without building each one (`ls -l` of thousands of them): the sized
// size must be the built size, for every fixture, every target kind, every rank (W' = 1, the
// source's W with each rank's own buffers, odd W', -sg), with and without -o crc. ZeRO-1/2 and
// bf16opt files are built to be sized.
TEST(LayoutsSizer, SizedIsBuiltForEveryFixtureAndTargetKind) {
  std::vector<std::string> fixtures = kSources;
  fixtures.insert(fixtures.end(), kEdgeSources.begin(), kEdgeSources.end());
  for (const char* parallel : {"tp2_dp1_z1", "tp2_dp1_z3", "tp2_dp2_z2"}) fixtures.emplace_back(parallel);
  const std::vector<std::string> targets = {"zero3-dp1-fp32",      "zero3-dp2-bf16", "zero3-dp3-fp16",
                                            "zero3-dp11-fp32-sg7", "zero1-dp3-fp32", "zero2-dp2-bf16-rr",
                                            "bf16opt-dp3"};
  size_t sized = 0;
  for (const std::string& fixture : fixtures)
    for (bool crc : {false, true}) {
      view::ViewOptions o;
      o.crc = crc;
      auto v = View::load(kFixtures + "/" + fixture + "/checkpoint", o);
      const std::string tag = Resaved{fixture, ""}.tag();
      for (const std::string& target : targets) {
        const Inode* root = find(*v, "/layouts");
        const Inode* t = v->lookup(root->ino, target);
        if (!t) continue;  // refused (an elastic source at ZeRO-3, bf16opt)
        const Inode& dir = at(*v, "/layouts/" + target + "/" + tag);
        for (auto e = v->dir_entry(dir, 2); e; e = v->dir_entry(dir, e->next)) {
          SCOPED_TRACE(fixture + " as " + target + (crc ? " -o crc: " : ": ") + std::string(e->name));
          EXPECT_EQ(bool(e->node->file().sizer), target.starts_with("zero3"));
          if (!e->node->file().sizer) continue;
          const uint64_t size = e->node->file().sizer();
          EXPECT_EQ(uint64_t(v->attr(*e->node).st_size), size);
          EXPECT_EQ(v->open(*e->node, O_RDONLY).size(), size) << "the built file has the sized size";
          ++sized;
        }
      }
    }
  EXPECT_GT(sized, 1000u);
}

}  // namespace
}  // namespace zm::test
