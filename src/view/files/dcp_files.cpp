#include "zeromount/view/files/dcp_files.h"

#include <climits>
#include <map>

#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/state_bytes.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/view/files/weights.h"
#include "zeromount/view/memo.h"

namespace zm::view {

namespace build = pt::build;
using pt::Node;

namespace {

uint64_t row_bytes(const std::vector<int64_t>& shape, pt::DType dtype) {
  return pt::numel(std::vector<int64_t>(shape.begin() + 1, shape.end())) * pt::element_size(dtype);
}

}  // namespace

uint64_t dcp_chunks(const MountedTag& t, DcpShape shape, const std::vector<WeightTensor>* weights) {
  const ds::TagIndex& ix = *t.index;
  const auto world = uint64_t(std::max(shape.world, 1));
  const auto cut = [&](const std::vector<int64_t>& dims) {
    return dims.empty() ? 1 : std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(dims[0]), world));
  };
  uint64_t n = 0;
  if (shape.model)
    for (const WeightTensor& w : weights ? *weights : weight_tensors(t, Weights::Master)) n += cut(*w.shape);
  if (shape.optimizer)
    for (const ds::Param& p : ix.params)
      n += cut(p.shape) * std::max<uint64_t>(ix.state_names.size() - 1, 2) + ix.scalar_names.size() + 1;  // a bound
  return n;
}

std::string dcp_size_refusal(const MountedTag& t, DcpShape shape, const std::vector<WeightTensor>* weights) {
  const uint64_t n = dcp_chunks(t, shape, weights);
  if (n <= kMaxDcpChunks) return "";
  return "its DCP folders would hold " + std::to_string(n) + " chunks at " + std::to_string(shape.world) +
         " ranks, more than " + std::to_string(kMaxDcpChunks) + " (their plans and .metadata grow with them)";
}

DcpPlan::DcpPlan(const MountedTag& t, DcpShape shape) : tag_(&t) {
  const ds::TagIndex& ix = *t.index;
  if (const std::string why = ds::torch_state_refusal(ix); !why.empty()) throw Error(ix.dir + ": " + why, ENOTSUP);
  // The model's tensors, listed once: the bound on chunks and the items are made from them.
  const std::vector<WeightTensor> weights =
      shape.model ? weight_tensors(t, Weights::Master) : std::vector<WeightTensor>{};
  if (const std::string why = dcp_size_refusal(t, shape, &weights); !why.empty())
    throw Error(ix.dir + ": " + why, EFBIG);
  const int files = std::max(shape.world, 1);
  sizes_.assign(size_t(files), 0);
  at_.reserve(size_t(dcp_chunks(t, shape, &weights)));
  const pt::PtOptions opts = t.pt_options("archive");  // FileSystemWriter torch.save()s each item into an open file

  // A tensor's chunks: whole in file 0, or cut where FSDP2 shards dim 0 at `world` ranks. An
  // item's length depends on its chunk's type and shape only: measured once per kind.
  std::map<std::pair<pt::DType, std::vector<int64_t>>, uint64_t> item_bytes;
  const auto place = [&](uint32_t file, uint64_t length) {
    at_.push_back({sizes_[file], length});
    sizes_[file] += length;
  };
  const auto tensor = [&](Source s, pt::DType dtype, const std::vector<int64_t>& shape_) {
    Placed p{s, dtype, &shape_, !shape_.empty() && files > 1, 1, at_.size()};
    if (p.cut) p.chunks = uint32_t(pt::dcp::fsdp_ranks_with_rows(shape_[0], files));
    sources_.push_back(p);
    for (uint32_t k = 0; k < p.chunks; ++k) {
      pt::dcp::Chunk c;
      chunk_of(p, k, c);
      auto [at, fresh] = item_bytes.try_emplace({dtype, c.sizes});
      if (fresh) {
        pt::Arena a;
        pt::VirtualFile zeros;  // of its size, to measure it
        zeros.append_zero(pt::numel(c.sizes) * pt::element_size(dtype));
        at->second = pt::pt_size(pt::pt_records(build::tensor(a, dtype, c.sizes, std::move(zeros))), opts);
      }
      place(c.file, at->second);
    }
    return uint32_t(sources_.size() - 1);
  };
  const auto object = [&](Source s, const std::vector<int64_t>* tensor_shape, pt::DType dtype) {
    sources_.push_back({s, dtype, tensor_shape, false, 1, at_.size()});
    pt::Arena a;
    place(0, pt::pt_size(pt::pt_records(object_node(a, s)), opts));
    return uint32_t(sources_.size() - 1);
  };
  const auto add = [&](Entry::Name name, uint32_t source, uint32_t a = 0, uint32_t b = 0, uint32_t c = 0) {
    entries_.push_back({name, source, a, b, c});
  };

  if (shape.model) {
    std::vector<uint32_t> source_of(weights.size());
    for (uint32_t k = 0; k < weights.size(); ++k) {
      const WeightTensor& w = weights[k];
      model_.push_back({w.name, w.shape, w.dtype});
      source_of[k] = w.shares != SIZE_MAX ? source_of.at(w.shares) : tensor({Source::Model, k}, w.dtype, *w.shape);
      add(Entry::Model, source_of[k], k);
      if (shape.torchtitan) add(Entry::ModelTop, source_of[k], k);
    }
  }
  if (shape.optimizer) {
    groups_ = ds::torch_groups(ix);
    // Before its first step an optimizer has no state, but a loader's fresh torch Adam asks for
    // zeros and step 0 (get_state_dict makes them): serve those, as the next step would start.
    const bool fresh_adam = !ix.has_state();
    static const std::vector<int64_t> kScalar;
    for (uint32_t g = 0; g < groups_.size(); ++g) {
      const ds::TorchGroup& group = groups_[g];
      for (uint32_t p : group.params) {
        const ds::Param& param = ix.params[p];
        for (uint32_t k = 1; k < ix.state_names.size(); ++k)
          if (ix.has(param, k))  // a Muon group keeps momentum_buffer, the other Adam's moments
            add(Entry::State, tensor({Source::State, p, k}, ix.master_dtype, param.shape), p, k);
        for (uint32_t k = 0; k < ix.scalar_names.size(); ++k) {
          const ds::StepValue* kept = ix.value(param.step, k);
          if (!kept) continue;
          const ds::StepValue& v = *kept;
          // Kept whole, as stored ('step' is a 0-d tensor for torch's Adam, a number for others).
          add(Entry::Scalar,
              object({Source::Scalar, p, k}, v.kind == ds::StepValue::Tensor ? &v.shape : nullptr, v.dtype), p, k);
        }
        if (fresh_adam) {
          for (uint32_t which : {0u, 1u})  // exp_avg, exp_avg_sq
            add(Entry::Fresh, tensor({Source::Zeros, p, 0}, pt::DType::F32, param.shape), p, which);
          add(Entry::Fresh, tensor({Source::Zeros, p, 1}, pt::DType::F32, kScalar), p, 2);
        }
      }
      for (uint32_t k = 0; k < group.hypers.size(); ++k) {
        const uint32_t src = object({Source::Hyper, g, k}, nullptr, pt::DType::F32);
        add(Entry::Hyper, src, g, k);
        if (shape.torchtitan)  // flatten_optimizer_state_dict: every hyper-parameter per parameter name
          for (uint32_t p : group.params) add(Entry::HyperFlat, src, g, k, p);
      }
      add(Entry::Names, object({Source::Names, g, 0}, nullptr, pt::DType::F32), g);
    }
  }
  layout_ = pt::dcp::layout_metadata(*this);
}

pt::dcp::Rows DcpPlan::rows_of(const Placed& p, size_t k) const {
  return pt::dcp::fsdp_rows((*p.shape)[0], world(), int(k));
}

void DcpPlan::chunk_of(const Placed& p, size_t k, pt::dcp::Chunk& out) const {
  out.offsets.clear();
  out.sizes.clear();
  out.file = 0;
  if (p.shape) {
    out.sizes = *p.shape;
    out.offsets.assign(p.shape->size(), 0);
  }
  if (p.cut) {
    const pt::dcp::Rows rows = rows_of(p, k);
    out.offsets[0] = rows.first;
    out.sizes[0] = rows.n;
    out.file = rows.n > 0 ? uint32_t(k) : 0;  // a tensor of 0 rows: one empty chunk in file 0
  }
  if (p.first + k < at_.size()) {
    out.offset = at_[p.first + k].offset;
    out.length = at_[p.first + k].length;
  }
}

void DcpPlan::chunk(size_t i, size_t k, pt::dcp::Chunk& out) const {
  chunk_of(sources_.at(entries_.at(i).source), k, out);
}

void DcpPlan::item(size_t i, pt::dcp::Item& out, size_t& chunk_count) const {
  const ds::TagIndex& ix = *tag_->index;
  const Entry& e = entries_.at(i);
  const Placed& p = sources_.at(e.source);
  out.tensor = p.shape != nullptr;
  out.dtype = p.dtype;
  out.size = p.shape ? *p.shape : std::vector<int64_t>{};
  chunk_count = p.chunks;
  static constexpr const char* kFresh[] = {"exp_avg", "exp_avg_sq", "step"};
  const auto state = [&](const std::string& param, const std::string& k) {
    out.fqn = "optimizer.state." + param + "." + k;
    out.path = {"optimizer", "state", param, k};
  };
  const auto hyper = [&]() -> const std::string& { return groups_.at(e.a).hypers.at(e.b).first; };
  switch (e.name) {
    case Entry::Model:
      out.fqn = "model." + *model_.at(e.a).name;
      out.path = {"model", *model_[e.a].name};
      return;
    case Entry::ModelTop:
      out.fqn = *model_.at(e.a).name;
      out.path = {out.fqn};
      return;
    case Entry::State:
      return state(ix.params.at(e.a).name, ix.state_names.at(e.b));
    case Entry::Scalar:
      return state(ix.params.at(e.a).name, ix.scalar_names.at(e.b));
    case Entry::Fresh:
      return state(ix.params.at(e.a).name, kFresh[e.b]);
    case Entry::Hyper:
      out.fqn = "optimizer.param_groups." + std::to_string(e.a) + "." + hyper();
      out.path = {"optimizer", "param_groups", int64_t(e.a), hyper()};
      return;
    case Entry::HyperFlat: {
      const std::string key = "param_groups." + ix.params.at(e.c).name + "." + hyper();
      out.fqn = "optimizer." + key;
      out.path = {"optimizer", key};
      return;
    }
    case Entry::Names:
      out.fqn = "optimizer.param_groups." + std::to_string(e.a) + ".params";
      out.path = {"optimizer", "param_groups", int64_t(e.a), "params"};
      return;
  }
}

pt::VirtualFile DcpPlan::metadata(const std::shared_ptr<const DcpPlan>& plan) {
  return pt::dcp::metadata_file(plan, plan->layout_);
}

const Node* DcpPlan::names_node(pt::Arena& a, uint32_t group) const {
  std::vector<std::string> names;
  for (uint32_t p : groups_.at(group).params) names.push_back(tag_->index->params[p].name);
  return build::str_list(a, names);
}

const Node* DcpPlan::object_node(pt::Arena& a, const Source& s) const {
  const ds::TagIndex& ix = *tag_->index;
  switch (s.kind) {
    case Source::Scalar:
      return ds::step_value_node(a, ix.scalars.at(size_t(ix.params.at(s.index).step)).at(s.k), tag_->mapper());
    case Source::Hyper:
      return groups_.at(s.index).hypers.at(s.k).second;
    case Source::Names:
      return names_node(a, s.index);
    default:
      return nullptr;
  }
}

uint64_t DcpPlan::bytes() const {
  uint64_t n = sizeof(*this) + kept_bytes(model_) + kept_bytes(groups_) + kept_bytes(sources_) + kept_bytes(entries_) +
               kept_bytes(at_) + kept_bytes(sizes_) + layout_.bytes();
  for (const auto& g : groups_) n += kept_bytes(g.hypers) + kept_bytes(g.params);
  return n;
}

pt::VirtualFile DcpPlan::build(size_t file) const {
  const MountedTag& t = *tag_;
  const ds::TagIndex& ix = *t.index;
  std::vector<WeightTensor> weights;
  const pt::PtOptions opts = t.pt_options("archive");  // as above
  pt::VirtualFile out;
  for (const Placed& p : sources_) {
    // This file's chunk of p, if it has one: chunk `file` of a cut tensor, else file 0's whole.
    size_t k = 0;
    if (p.cut && (*p.shape)[0] > 0) {
      if (file >= p.chunks) continue;
      k = file;
    } else if (file != 0) {
      continue;
    }
    const Source& s = p.what;
    pt::Arena a;
    const Node* node = object_node(a, s);
    if (!node) {
      pt::VirtualFile whole;  // a tensor's bytes, whole, then cut to the chunk's rows
      switch (s.kind) {
        case Source::Model:
          if (weights.empty()) weights = weight_tensors(t, Weights::Master);
          weights.at(s.index).append(whole);
          break;
        case Source::State:
          ds::state_bytes(ix, ix.params.at(s.index), s.k, t.mapper(), whole);
          break;
        default:  // Zeros
          whole.append_zero(pt::numel(*p.shape) * pt::element_size(p.dtype));
          break;
      }
      pt::dcp::Chunk c;
      chunk_of(p, k, c);
      const uint64_t row = p.cut ? row_bytes(*p.shape, p.dtype) : 0;
      pt::VirtualFile rows;
      rows.append(whole, p.cut ? uint64_t(c.offsets[0]) * row : 0, p.cut ? uint64_t(c.sizes[0]) * row : whole.size());
      node = build::tensor(a, p.dtype, c.sizes, std::move(rows));
    }
    out.append(pt::build_pt(node, opts));
  }
  if (out.size() != sizes_.at(file))
    throw Error(ix.dir + ": DCP data file " + pt::dcp::data_file_name(int(file)) + " is " + std::to_string(out.size()) +
                    " bytes where its plan says " + std::to_string(sizes_[file]),
                EIO);
  return out;
}

namespace {

// A DCP folder. Anyone may look up any number of them, so the tree keeps how to make a plan again
// (the View's DcpPlans), never the plan.
class DcpDir final : public LazyDir {
 public:
  DcpDir(std::shared_ptr<const DcpPlans> plans, const MountedTag& t, DcpShape shape, struct timespec mtime)
      : plans_(std::move(plans)), tag_(&t), shape_(shape), mtime_(mtime) {}
  void prepare(std::string_view name) const override {
    if (name != ".metadata") return;  // a data file is named from its rank alone
    try {
      plans_->get(*tag_, shape_);
    } catch (const Error&) {  // make() fails the lookup with the reason
    }
  }
  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    const MountedTag* t = tag_;
    const DcpShape shape = shape_;
    const std::shared_ptr<const DcpPlans> plans = plans_;
    if (name == ".metadata") {
      const auto plan = plans->get(*t, shape);
      return tree.add_file(
          dir, std::string(name), mtime_, [plans, t, shape] { return DcpPlan::metadata(plans->get(*t, shape)); },
          plan->metadata_size(), false);
    }
    // The rank is read off the name: a lookup costs the same at any W.
    const std::optional<int> r = pt::dcp::data_file_rank(name);
    if (!r || *r >= files()) return 0;
    return tree.add_file(
        dir, std::string(name), mtime_, [plans, t, shape, r = *r] { return plans->get(*t, shape)->build(size_t(r)); },
        [plans, t, shape, r = *r] { return plans->get(*t, shape)->file_size(size_t(r)); }, false);
  }
  uint64_t listed() const override { return uint64_t(files()) + 1; }
  std::string listed_name(uint64_t k) const override {
    return k == 0 ? ".metadata" : pt::dcp::data_file_name(int(k - 1));
  }

 private:
  int files() const { return std::max(shape_.world, 1); }
  std::shared_ptr<const DcpPlans> plans_;
  const MountedTag* tag_;
  DcpShape shape_;
  struct timespec mtime_;
};

}  // namespace

std::shared_ptr<const DcpPlan> DcpPlans::get(const MountedTag& t, DcpShape shape) const {
  return memo_.get({&t, shape}, [&] {
    if (Tree::exclusive_here()) plan_weight().made_under_tree_lock.fetch_add(1, std::memory_order_relaxed);
    return std::make_shared<const DcpPlan>(t, shape);
  });
}

std::shared_ptr<const DcpPlans> make_dcp_plans() {
  return std::make_shared<const DcpPlans>();
}

std::shared_ptr<const LazyDir> make_dcp_dir(std::shared_ptr<const DcpPlans> plans, const MountedTag& t, DcpShape shape,
                                            struct timespec mtime) {
  return std::make_shared<DcpDir>(std::move(plans), t, shape, mtime);
}

}  // namespace zm::view
