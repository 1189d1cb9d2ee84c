#include "zeromount/pt/dcp.h"

#include "zeromount/pt/build.h"
#include "zeromount/pt/pickle_writer.h"

namespace zm::pt::dcp {

namespace {

constexpr const char* kMeta = "torch.distributed.checkpoint.metadata";

// A call pickled as REDUCE: callable(*args).
Node* call(Arena& a, const char* module, const char* name, std::vector<const Node*> args) {
  Node* n = a.make(Kind::Object);
  n->callee = a.make_global(module, name);
  n->args = build::tuple(a, std::move(args));
  return n;
}

// TensorProperties pickles its __getstate__: (dtype, layout, requires_grad, memory format, pin_memory).
const Node* properties(Arena& a, DType dtype) {
  const Node* state = build::tuple(
      a, {a.make_global("torch", std::string(dtype_name(dtype))),
          call(a, "torch.serialization", "_get_layout", {a.make_str("torch.strided")}), build::boolean(a, false),
          call(a, kMeta, "_MEM_FORMAT_ENCODING", {a.make_int(0)}), build::boolean(a, false)});
  return build::new_object(a, kMeta, "TensorProperties", state);
}

const Node* object(Arena& a, const char* module, const char* cls,
                   std::vector<std::pair<const char*, const Node*>> fields) {
  Node* d = build::dict(a);
  for (const auto& [k, v] : fields) build::add(d, a, k, v);
  return build::new_object(a, module, cls, d);
}

}  // namespace

std::string metadata(const std::vector<Item>& items, const std::vector<std::string>& files) {
  Arena a;
  Node* sd_meta = build::dict(a);
  Node* planner = build::dict(a);
  Node* storage = build::dict(a);
  std::vector<const Node*> file_names;
  for (const auto& f : files) file_names.push_back(a.make_str(f));
  for (const Item& it : items) {
    std::vector<const Node*> path;
    for (const auto& p : it.path)
      path.push_back(std::holds_alternative<int64_t>(p) ? a.make_int(std::get<int64_t>(p))
                                                        : a.make_str(std::get<std::string>(p)));
    build::add(planner, a, it.fqn, build::tuple(a, std::move(path)));
    if (it.tensor) {
      std::vector<const Node*> chunks;
      for (const Chunk& c : it.chunks)
        chunks.push_back(
            object(a, kMeta, "ChunkStorageMetadata",
                   {{"offsets", build::torch_size(a, c.offsets)}, {"sizes", build::torch_size(a, c.sizes)}}));
      build::add(sd_meta, a, it.fqn,
                 object(a, kMeta, "TensorStorageMetadata",
                        {{"properties", properties(a, it.dtype)},
                         {"size", build::torch_size(a, it.size)},
                         {"chunks", build::list(a, std::move(chunks))}}));
    } else {
      build::add(sd_meta, a, it.fqn, build::new_object(a, kMeta, "BytesStorageMetadata", nullptr));
    }
    for (size_t k = 0; k < it.chunks.size(); ++k) {
      const Chunk& c = it.chunks[k];
      const Node* index = object(a, kMeta, "MetadataIndex",
                                 {{"fqn", a.make_str(it.fqn)},
                                  {"offset", it.tensor ? build::torch_size(a, c.offsets) : build::none(a)},
                                  {"index", it.tensor ? a.make_int(int64_t(k)) : build::none(a)}});
      const Node* info = object(a, "torch.distributed.checkpoint.filesystem", "_StorageInfo",
                                {{"relative_path", file_names.at(c.file)},
                                 {"offset", a.make_int(int64_t(c.offset))},
                                 {"length", a.make_int(int64_t(c.length))}});
      storage->entries.emplace_back(index, info);
    }
  }
  const Node* root = object(a, kMeta, "Metadata",
                            {{"state_dict_metadata", sd_meta},
                             {"planner_data", planner},
                             {"storage_data", storage},
                             {"storage_meta", build::none(a)},
                             {"version", a.make_str("1.0.0")}});
  return pickle_value(root).pickle;
}

Rows fsdp_rows(int64_t rows, int world, int rank) {
  const int64_t each = (rows + world - 1) / world;
  const int64_t first = std::min<int64_t>(each * rank, rows);
  return {first, std::min<int64_t>(each, rows - first)};
}

std::string data_file_name(int rank) {
  return "__" + std::to_string(rank) + "_0.distcp";
}

}  // namespace zm::pt::dcp
