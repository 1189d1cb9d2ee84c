// The model-state pickle of a tag: DeepSpeed's own, or the one made up for a DCP source, so that
// ds/model_file.h's skeleton, the layouts and the universal folder need no knowledge of the source.
#include "zeromount/ds/model_root.h"

#include "zeromount/ds/inspect.h"
#include "zeromount/pt/build.h"
#include "zeromount/pt/pt_file.h"

namespace zm::ds {

namespace build = pt::build;
using pt::Kind;
using pt::Node;

namespace {

// The model root made up for a source, with the arena that holds it.
struct MadeRoot {
  pt::Arena arena;
  const Node* root = nullptr;
};

int64_t step_count(const TagIndex& ix) {
  const StepValue* step = ix.run_step();
  return step ? int64_t(step_number(ix, *step)) : 0;
}

const Node* int_entry(const Node* d, const char* key) {
  const Node* v = d ? d->get(key) : nullptr;
  return v && v->kind == Kind::Int ? v : nullptr;
}

// DeepSpeed's schedulers (WarmupLR, ...) keep and load only 'last_batch_iteration', one less than
// the steps taken; torch's keep 'last_epoch', the steps taken (their constructor steps once).
const Node* made_scheduler(pt::Arena& a, const TagIndex& ix) {
  Node* d = build::dict(a);
  if (ix.lr_scheduler)
    for (const auto& [k, v] : ix.lr_scheduler->entries) d->entries.emplace_back(k, v);
  if (int_entry(d, "last_batch_iteration")) return d;
  const Node* last_epoch = int_entry(d, "last_epoch");
  build::add(d, a, "last_batch_iteration", a.make_int(last_epoch ? last_epoch->i - 1 : step_count(ix) - 1));
  return d;
}

}  // namespace

const Node* made_ds_config(pt::Arena& a, const TagIndex& ix) {
  Node* zero = build::dict(a);
  build::add(zero, a, "stage", a.make_int(2));
  auto enabled = [&](bool on) {
    Node* d = build::dict(a);
    build::add(d, a, "enabled", build::boolean(a, on));
    return d;
  };
  Node* config = build::dict(a);
  build::add(config, a, "zero_optimization", zero);
  build::add(config, a, "bf16", enabled(ix.module_dtype == pt::DType::BF16));
  build::add(config, a, "fp16", enabled(ix.module_dtype == pt::DType::F16));
  return config;
}

const Node* made_model_root(pt::Arena& a, const TagIndex& ix) {
  Node* module = build::ordered_dict(a);
  std::vector<std::string> buffer_names;
  for (const PlainTensor& f : ix.frozen) build::add(module, a, f.name, build::none(a));
  for (const PlainTensor& b : ix.buffers) {
    build::add(module, a, b.name, build::none(a));
    buffer_names.push_back(b.name);
  }
  for (const Param& p : ix.params) build::add(module, a, p.name, build::none(a));
  Node* dims = build::dict(a);
  build::add(dims, a, "pp_degree", a.make_int(1));
  build::add(dims, a, "tp_degree", a.make_int(1));
  Node* root = build::dict(a);
  build::add(root, a, "module", module);
  build::add(root, a, "buffer_names", build::str_list(a, buffer_names));
  build::add(root, a, "optimizer", build::none(a));
  build::add(root, a, "param_shapes", build::none(a));
  build::add(root, a, "frozen_param_shapes", build::none(a));
  build::add(root, a, "shared_params", build::dict(a));
  build::add(root, a, "frozen_param_fragments", build::none(a));
  build::add(root, a, "lr_scheduler", made_scheduler(a, ix));
  build::add(root, a, "data_sampler", build::none(a));
  build::add(root, a, "random_ltd", build::none(a));
  build::add(root, a, "sparse_tensor_module_names", a.make(Kind::Set));
  build::add(root, a, "skipped_steps", a.make_int(0));
  build::add(root, a, "global_steps", a.make_int(step_count(ix)));
  build::add(root, a, "dp_world_size", a.make_int(ix.dp));
  build::add(root, a, "mp_world_size", a.make_int(1));
  build::add(root, a, "checkpoint_parallel_dimensions", dims);
  build::add(root, a, "ds_config", made_ds_config(a, ix));
  build::add(root, a, "ds_version", a.make_str(kMadeDsVersion));
  return root;
}

std::shared_ptr<const Node> model_root(const TagIndex& ix) {
  if (!ix.model_files.empty()) {
    std::shared_ptr<const pt::PtFile> file = pt::load_pt(ix.model_files.front());
    return std::shared_ptr<const Node>(file, file->root);
  }
  if (ix.source != SourceKind::Dcp || !ix.optimizer_saved) return nullptr;
  auto made = std::make_shared<MadeRoot>();
  made->root = made_model_root(made->arena, ix);
  return std::shared_ptr<const Node>(made, made->root);
}

std::string scheduler_note(const TagIndex& ix) {
  if (!ix.lr_scheduler)
    return "made from the step count, {'last_batch_iteration': " + std::to_string(step_count(ix) - 1) +
           "}: the source keeps none";
  return "the source's own, with DeepSpeed's 'last_batch_iteration' (last_epoch - 1) added";
}

std::string written_ds_version(const TagIndex& ix) {
  if (!ix.ds_version.empty()) return ix.ds_version;
  return ix.source == SourceKind::Dcp ? kMadeDsVersion : "0.0.0";
}

}  // namespace zm::ds
