#include "zeromount/view/files/universal.h"

#include "zeromount/ds/autoep_model_file.h"
#include "zeromount/ds/optim_file.h"
#include "zeromount/ds/universal_file.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/view/files/layout_files.h"

namespace zm::view {

pt::VirtualFile param_state_file(const MountedTag& t, const ds::Param& p, size_t state, bool bare) {
  pt::Arena a;
  return pt::build_pt(ds::param_state_pickle(a, *t.index, p, state, bare, t.mapper()),
                      t.pt_options(t.index->state_names[state]));
}

pt::VirtualFile scalar_file(const MountedTag& t, size_t group, size_t k) {
  pt::Arena a;
  const ds::TagIndex& ix = *t.index;
  return pt::build_pt(ds::step_value_node(a, ix.scalars.at(group).at(k), t.mapper()),
                      t.pt_options(ix.scalar_names.at(k)));
}

pt::VirtualFile autoep_model_states_file(const MountedTag& t, const std::string& path) {
  const ds::TagIndex& ix = *t.index;
  size_t shard = 0;
  while (shard < ix.shards.size() && ix.shards[shard].path != path) ++shard;
  if (shard == ix.shards.size()) throw Error(path + ": not among the indexed shards", EIO);
  const auto src = pt::load_pt(path);
  if (src->pickle_hash != ix.shards[shard].pickle_hash)
    throw Error(path + ": changed since it was indexed (remount)", ESTALE);
  pt::Arena a;
  const pt::Node* root = ds::autoep_model_states_pickle(a, ix, shard, src->root, t.mapper());
  std::string name = path.substr(path.find_last_of('/') + 1);
  name = name.substr(0, name.size() - 3);  // torch.save names the archive after the file's stem
  return pt::build_pt(root, t.pt_options(name));
}

ds::TargetLayout made_model_states_layout(const ds::TagIndex& ix) {
  ds::TargetLayout t;
  t.stage = ds::TargetStage::Zero2;
  t.dp = uint32_t(ix.dp);
  t.precision = ix.module_dtype == pt::DType::BF16  ? ds::Precision::Bf16
                : ix.module_dtype == pt::DType::F16 ? ds::Precision::Fp16
                                                    : ds::Precision::Fp32;
  return t;
}

pt::VirtualFile made_model_states_file(const MountedTag& t) {
  return LayoutTag(t, made_model_states_layout(*t.index)).build(0);
}

pt::VirtualFile optimizer_state_file(const MountedTag& t) {
  pt::Arena a;
  return pt::build_pt(ds::optimizer_state_pickle(a, *t.index, t.mapper()), t.pt_options("optimizer_state"));
}

}  // namespace zm::view
