// Consolidated weights per tag, as a folder Hugging Face's from_pretrained loads, in two kinds:
//   fp32      <T>_fp32/: every weight in fp32, as zero_to_fp32.py --safe_serialization writes it;
//   training  <T>_bf16/ or <T>_fp16/: the precision the run trained in, the file people publish
//             for inference. Shown only for 16-bit runs; fp32 runs have <T>_fp32 alone.
// Beside the weights (one model.safetensors, or shards and their index) each shows the checkpoint
// folder's config.json, generation_config.json and tokenizer files, where it has them (a DCP tag's
// own too: the Trainer under FSDP saves them into checkpoint-N/, the tag).
#include <sys/stat.h>

#include <memory>

#include "zeromount/ds/source_dir.h"
#include "zeromount/view/files/weights.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view_options.h"

namespace zm::view {

namespace {

// What AutoConfig, GenerationConfig and AutoTokenizer read from a model folder.
bool model_file_name(std::string_view name) {
  static const char* kNames[] = {"config.json",
                                 "generation_config.json",
                                 "tokenizer.json",
                                 "tokenizer_config.json",
                                 "special_tokens_map.json",
                                 "added_tokens.json",
                                 "vocab.json",
                                 "vocab.txt",
                                 "merges.txt",
                                 "tokenizer.model",
                                 "spiece.model",
                                 "sentencepiece.bpe.model",
                                 "chat_template.jinja",
                                 "chat_template.json",
                                 "preprocessor_config.json",
                                 "processor_config.json"};
  for (const char* k : kNames)
    if (name == k) return true;
  return false;
}
bool model_file(const Inode& n) { return !n.is_dir() && model_file_name(n.name); }

// The Trainer under FSDP saves config.json and the tokenizer into checkpoint-N/, which is the tag
// itself when it holds a DCP save: the tag folder's own model files, where its folder has none.
void add_tag_model_files(ProviderContext& cx, uint64_t d, const ds::TagIndex& ix) {
  if (ix.source != ds::SourceKind::Dcp) return;
  std::error_code ec;
  const ds::Dir dir = ds::open_dir(ix.dir);
  for (const ds::Dir::Entry& e : dir.ok() ? dir.list(ec) : std::vector<ds::Dir::Entry>{}) {
    struct stat st {};
    if (model_file_name(e.name) && !cx.tree().lookup(d, e.name) && dir.stat(e.name, st) && S_ISREG(st.st_mode))
      cx.add_real_file(d, e.name, ix.dir + "/" + e.name);
  }
}

class WeightsProvider final : public Provider {
 public:
  explicit WeightsProvider(Weights which) : which_(which) {}
  std::string_view kind() const override { return which_ == Weights::Master ? "fp32" : "training"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    const std::string suffix = folder_suffix(*tag.index);
    if (suffix.empty()) return;
    const struct timespec mtime = cx.mtime();
    const uint64_t d = cx.add_made_dir(tag.index->tag + suffix, *this, {&tag});
    if (!d) return;
    copy_real_entries(cx.tree(), cx.folder(), d, model_file);
    add_tag_model_files(cx, d, *tag.index);
    const MountedTag* t = &tag;
    const Weights which = which_;
    auto plan = std::make_shared<const WeightShards>(plan_weights(tag, which, cx.options().max_shard_bytes));
    for (size_t k = 0; k < plan->files.size(); ++k)
      cx.tree().add_file(d, plan->files[k], mtime,
                         [t, which, plan, k] { return weights_file(*t, which, plan->tensors[k]); });
    if (plan->sharded()) cx.add_text(d, "model.safetensors.index.json", weights_index(*plan), mtime);
  }

  void add_real(Tree& tree, const CheckpointFolder& folder, const Inode& entry) const override {
    if (!model_file(entry)) return;
    std::vector<uint64_t> mine;  // this kind's folders beside the tags
    for (uint64_t c : tree.get(folder.ino())->folder().children)
      if (const Inode* n = tree.get(c); n->made_by == this && n->is_dir()) mine.push_back(c);
    for (uint64_t d : mine)
      if (!tree.lookup(d, entry.name)) {
        tree.add_copy(d, entry);
        tree.set_growing(d, true);  // its listing changed: the kernel may no longer keep it
      }
  }

 private:
  // "" when this tag has no such folder.
  std::string folder_suffix(const ds::TagIndex& ix) const {
    if (which_ == Weights::Master) return "_fp32";
    if (ix.parallel()) return "";  // module weights are per tensor-parallel rank: not merged yet
    if (ix.module_dtype == pt::DType::BF16) return "_bf16";
    if (ix.module_dtype == pt::DType::F16) return "_fp16";
    return "";
  }
  Weights which_;
};

}  // namespace

std::unique_ptr<Provider> make_fp32_provider() {
  return std::make_unique<WeightsProvider>(Weights::Master);
}

std::unique_ptr<Provider> make_training_provider() {
  return std::make_unique<WeightsProvider>(Weights::Training);
}

}  // namespace zm::view
