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
using Source = DcpPlan::Source;

namespace {

uint64_t row_bytes(const std::vector<int64_t>& shape, pt::DType dtype) {
  return pt::numel(std::vector<int64_t>(shape.begin() + 1, shape.end())) * pt::element_size(dtype);
}

// A tensor of the plan, whole: its type and shape.
struct Shape {
  pt::DType dtype;
  std::vector<int64_t> shape;
};

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
  pieces_.resize(size_t(files));
  sizes_.assign(size_t(files), 0);
  std::vector<std::string> names;
  for (int r = 0; r < files; ++r) names.push_back(pt::dcp::data_file_name(r));
  std::vector<pt::dcp::Item> items;
  const pt::PtOptions opts = t.pt_options("archive");  // FileSystemWriter torch.save()s each item into an open file

  // Chunks of a tensor: whole in file 0, or cut where FSDP2 shards dim 0 at `world` ranks.
  std::map<std::pair<pt::DType, std::vector<int64_t>>, uint64_t> item_bytes;  // by chunk type and shape
  const auto place = [&](uint32_t src, uint32_t file, int64_t first, int64_t rows, uint64_t length) {
    pieces_[file].push_back({src, first, rows});
    const uint64_t at = sizes_[file];
    sizes_[file] += length;
    return at;
  };
  const auto tensor = [&](Source s, const Shape& w) {
    const auto src = uint32_t(sources_.size());
    sources_.push_back(s);
    std::vector<pt::dcp::Chunk> chunks;
    const auto chunk = [&](uint32_t file, int64_t first, int64_t rows) {
      pt::dcp::Chunk c;
      c.sizes = w.shape;
      c.offsets.assign(w.shape.size(), 0);
      if (rows >= 0) {
        c.sizes[0] = rows;
        c.offsets[0] = first;
      }
      auto [at, fresh] = item_bytes.try_emplace({w.dtype, c.sizes});
      if (fresh) {
        pt::Arena a;
        pt::VirtualFile zeros;  // of its size, to measure it
        zeros.append_zero(pt::numel(c.sizes) * pt::element_size(w.dtype));
        Node* n = build::tensor(a, w.dtype, c.sizes, std::move(zeros));
        at->second = pt::pt_size(pt::pt_records(n), opts);
      }
      c.file = file;
      c.length = at->second;
      c.offset = place(src, file, first, rows, c.length);
      chunks.push_back(std::move(c));
    };
    if (w.shape.empty() || files == 1) {
      chunk(0, 0, -1);
    } else {
      for (int r = 0; r < files; ++r)
        if (const auto rows = pt::dcp::fsdp_rows(w.shape[0], files, r); rows.n > 0)
          chunk(uint32_t(r), rows.first, rows.n);
      if (chunks.empty()) chunk(0, 0, 0);  // a tensor of 0 rows: one empty chunk
    }
    return chunks;
  };
  const auto object = [&](Source s, const Node* value) {
    const auto src = uint32_t(sources_.size());
    sources_.push_back(s);
    pt::dcp::Chunk c;
    c.length = pt::pt_size(pt::pt_records(value), opts);
    c.offset = place(src, 0, 0, -1, c.length);
    return std::vector<pt::dcp::Chunk>{c};
  };
  const auto add = [&](std::string fqn, std::vector<std::variant<std::string, int64_t>> path, bool is_tensor,
                       const Shape* w, const std::vector<pt::dcp::Chunk>& chunks) {
    pt::dcp::Item it;
    it.fqn = std::move(fqn);
    it.path = std::move(path);
    it.tensor = is_tensor;
    if (w) {
      it.dtype = w->dtype;
      it.size = w->shape;
    }
    it.chunks = chunks;
    items.push_back(std::move(it));
  };

  if (shape.model) {
    std::vector<std::vector<pt::dcp::Chunk>> chunks(weights.size());
    for (size_t k = 0; k < weights.size(); ++k) {
      const WeightTensor& w = weights[k];
      const Shape s{w.dtype, *w.shape};
      chunks[k] = w.shares != SIZE_MAX ? chunks.at(w.shares) : tensor({Source::Model, uint32_t(k)}, s);
      add("model." + *w.name, {"model", *w.name}, true, &s, chunks[k]);
      if (shape.torchtitan) add(*w.name, {*w.name}, true, &s, chunks[k]);
    }
  }
  if (shape.optimizer) {
    groups_ = ds::torch_groups(ix);
    // Before its first step an optimizer has no state, but a loader's fresh torch Adam asks for
    // zeros and step 0 (get_state_dict makes them): serve those, as the next step would start.
    const bool fresh_adam = !ix.has_state();
    for (uint32_t g = 0; g < groups_.size(); ++g) {
      const ds::TorchGroup& group = groups_[g];
      for (uint32_t p : group.params) {
        const ds::Param& param = ix.params[p];
        const std::string at = "optimizer.state." + param.name + ".";
        const Shape moment{ix.master_dtype, param.shape};
        for (uint32_t k = 1; k < ix.state_names.size(); ++k)
          if (ix.has(param, k))  // a Muon group keeps momentum_buffer, the other Adam's moments
            add(at + ix.state_names[k], {"optimizer", "state", param.name, ix.state_names[k]}, true, &moment,
                tensor({Source::State, p, k}, moment));
        for (uint32_t k = 0; k < ix.scalar_names.size() && param.step >= 0; ++k) {
          const ds::StepValue& v = ix.scalars.at(size_t(param.step)).at(k);
          if (v.kind == ds::StepValue::None) continue;
          const Shape s{v.dtype, v.shape};
          const std::vector<std::variant<std::string, int64_t>> path{"optimizer", "state", param.name,
                                                                     ix.scalar_names[k]};
          // Kept whole, as stored ('step' is a 0-d tensor for torch's Adam, a number for others).
          pt::Arena a;
          auto chunks = object({Source::Scalar, p, k}, ds::step_value_node(a, v, t.mapper()));
          if (v.kind == ds::StepValue::Tensor) {
            chunks[0].sizes = v.shape;
            chunks[0].offsets.assign(v.shape.size(), 0);
          }
          add(at + ix.scalar_names[k], path, v.kind == ds::StepValue::Tensor, &s, chunks);
        }
        if (fresh_adam) {
          const Shape zeros{pt::DType::F32, param.shape}, step{pt::DType::F32, {}};
          for (const char* k : {"exp_avg", "exp_avg_sq"})
            add(at + k, {"optimizer", "state", param.name, k}, true, &zeros, tensor({Source::Zeros, p, 0}, zeros));
          add(at + "step", {"optimizer", "state", param.name, "step"}, true, &step,
              tensor({Source::Zeros, p, 1}, step));
        }
      }
      const std::string at = "optimizer.param_groups." + std::to_string(g) + ".";
      for (uint32_t k = 0; k < group.hypers.size(); ++k) {
        const auto& [name, value] = group.hypers[k];
        const auto chunks = object({Source::Hyper, g, k}, value);
        add(at + name, {"optimizer", "param_groups", int64_t(g), name}, false, nullptr, chunks);
        if (shape.torchtitan)  // flatten_optimizer_state_dict: every hyper-parameter per parameter name
          for (uint32_t p : group.params) {
            const std::string key = "param_groups." + ix.params[p].name + "." + name;
            add("optimizer." + key, {"optimizer", key}, false, nullptr, chunks);
          }
      }
      pt::Arena a;
      add(at + "params", {"optimizer", "param_groups", int64_t(g), "params"}, false, nullptr,
          object({Source::Names, g, 0}, names_node(a, g)));
    }
  }
  metadata_ = pt::dcp::metadata(items, names);
}

const Node* DcpPlan::names_node(pt::Arena& a, uint32_t group) const {
  std::vector<std::string> names;
  for (uint32_t p : groups_.at(group).params) names.push_back(tag_->index->params[p].name);
  return build::str_list(a, names);
}

uint64_t DcpPlan::bytes() const {
  uint64_t n = sizeof(*this) + metadata_.capacity() + kept_bytes(groups_) + kept_bytes(sources_) + kept_bytes(sizes_) +
               kept_bytes(pieces_);
  for (const auto& g : groups_) n += kept_bytes(g.hypers) + kept_bytes(g.params);
  for (const auto& p : pieces_) n += kept_bytes(p);
  return n;
}

pt::VirtualFile DcpPlan::build(size_t file) const {
  const MountedTag& t = *tag_;
  const ds::TagIndex& ix = *t.index;
  std::vector<WeightTensor> weights;
  const pt::PtOptions opts = t.pt_options("archive");  // as above
  pt::VirtualFile out;
  for (const Piece& piece : pieces_.at(file)) {
    const Source& s = sources_[piece.source];
    pt::Arena a;
    const Node* node = nullptr;
    pt::VirtualFile whole;  // a tensor's bytes, whole, then cut to the piece's rows
    Shape w{pt::DType::F32, {}};
    switch (s.kind) {
      case Source::Model:
        if (weights.empty()) weights = weight_tensors(t, Weights::Master);
        weights.at(s.index).append(whole);
        w = {weights[s.index].dtype, *weights[s.index].shape};
        break;
      case Source::State:
        ds::state_bytes(ix, ix.params.at(s.index), s.k, t.mapper(), whole);
        w = {ix.master_dtype, ix.params[s.index].shape};
        break;
      case Source::Zeros:
        w = {pt::DType::F32, s.k == 0 ? ix.params.at(s.index).shape : std::vector<int64_t>{}};
        whole.append_zero(pt::numel(w.shape) * 4);
        break;
      case Source::Scalar:
        node = ds::step_value_node(a, ix.scalars.at(size_t(ix.params.at(s.index).step)).at(s.k), t.mapper());
        break;
      case Source::Hyper:
        node = groups_.at(s.index).hypers.at(s.k).second;
        break;
      case Source::Names:
        node = names_node(a, s.index);
        break;
    }
    if (!node) {
      std::vector<int64_t> shape = w.shape;
      uint64_t from = 0, length = whole.size();
      if (piece.rows >= 0) {
        shape[0] = piece.rows;
        from = uint64_t(piece.first_row) * row_bytes(w.shape, w.dtype);
        length = uint64_t(piece.rows) * row_bytes(w.shape, w.dtype);
      }
      pt::VirtualFile rows;
      rows.append(whole, from, length);
      node = build::tensor(a, w.dtype, shape, std::move(rows));
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

// The plans of the DCP folders looked into last, process-wide: anyone may look up any number of
// them, so the tree keeps how to make a plan again, never the plan.
std::shared_ptr<const DcpPlan> plan_of(const MountedTag& t, DcpShape shape) {
  static Memo<std::pair<const MountedTag*, DcpShape>, DcpPlan, 8, kPlanBudget> memo(&plan_weight());
  return memo.get({&t, shape}, [&] { return std::make_shared<const DcpPlan>(t, shape); });
}

class DcpDir final : public LazyDir {
 public:
  DcpDir(const MountedTag& t, DcpShape shape, struct timespec mtime) : tag_(&t), shape_(shape), mtime_(mtime) {}
  uint64_t make(Tree& tree, uint64_t dir, std::string_view name) const override {
    const MountedTag* t = tag_;
    const DcpShape shape = shape_;
    if (name == ".metadata") {
      const auto plan = plan_of(*t, shape);
      return tree.add_file(
          dir, std::string(name), mtime_,
          [t, shape] { return pt::VirtualFile::from_text(plan_of(*t, shape)->metadata()); }, plan->metadata().size(),
          false);
    }
    for (int r = 0; r < files(); ++r)
      if (name == pt::dcp::data_file_name(r))
        return tree.add_file(
            dir, std::string(name), mtime_, [t, shape, r] { return plan_of(*t, shape)->build(size_t(r)); },
            [t, shape, r] { return plan_of(*t, shape)->file_size(size_t(r)); }, false);
    return 0;
  }
  uint64_t listed() const override { return uint64_t(files()) + 1; }
  std::string listed_name(uint64_t k) const override {
    return k == 0 ? ".metadata" : pt::dcp::data_file_name(int(k - 1));
  }

 private:
  int files() const { return std::max(shape_.world, 1); }
  const MountedTag* tag_;
  DcpShape shape_;
  struct timespec mtime_;
};

}  // namespace

std::shared_ptr<const LazyDir> make_dcp_dir(const MountedTag& t, DcpShape shape, struct timespec mtime) {
  return std::make_shared<DcpDir>(t, shape, mtime);
}

}  // namespace zm::view
