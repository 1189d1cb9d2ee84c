#pragma once
// A checkpoint as the checks see it, whatever its format: a list of named tensors (and scalars),
// each with its bytes described, not read (a pt::VirtualFile over the input's files). Opening an
// input runs its structure checks (files open, zip CRCs, safetensors tiling, DCP chunks, DeepSpeed
// fragments, `latest`, ranks agreeing), because they are what reading its structure finds.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeromount/check/findings.h"
#include "zeromount/ds/tag_index.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::check {

// The files an input's tensors are read from, by id: what a VirtualFile's extents name.
//
// It also keeps the zip records' CRC-32s that the structure checks defer to the pass (`expect_crc`),
// so that each byte is read once: every read through pread() adds the CRC of the bytes it brought
// that lie in a record (they are in the cache already), and settle_crcs() combines each record's
// pieces (pt::crc32_combine), reads only what the pass did not (pickles, padding, records no item
// reads), and compares. Not thread-safe: one pass at a time.
class FileSet : public pt::ExtentReader {
 public:
  // Opens `path` once (read-only); the same path again gives the same id.
  uint32_t add(const std::string& path);
  const pt::File& file(uint32_t id) const { return *files_.at(id); }
  void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const override;

  // Bytes [offset, offset + length) of `file` (a zip record) must have CRC-32 `crc`; `subject`
  // names the record in a finding.
  void expect_crc(uint32_t file, uint64_t offset, uint64_t length, uint32_t crc, std::string subject);
  // Checks every record expected so far into `f` (check zip-crc) and forgets them. Returns the
  // bytes it had to read itself.
  uint64_t settle_crcs(Findings& f);

 private:
  struct Piece {
    uint64_t offset, length;
    uint32_t crc;
  };
  struct Record {
    uint64_t offset, length;
    uint32_t crc;
    std::string subject;
    std::vector<Piece> pieces;  // CRCs of parts read by the pass, in the order read
  };
  void note_read(uint32_t file, uint64_t offset, const char* buf, size_t n) const;
  std::vector<std::unique_ptr<pt::File>> files_;
  mutable std::vector<std::vector<Record>> records_;  // per file id, sorted by offset once sorted_[id]
  mutable std::vector<bool> sorted_;
};

// The states the checks and the diff know by role. Any other optimizer key keeps its own name.
inline constexpr const char* kWeight = "weight";  // a parameter's value: an fp32 master or a model weight
inline constexpr const char* kModule = "module";  // DeepSpeed's module weight in training precision
inline constexpr const char* kStep = "step";

// The parameters a param group holds, shared by that group's hyper-parameter items.
using Members = std::shared_ptr<const std::vector<std::string>>;

struct Item {
  std::string param;      // the parameter (or buffer) name as the input spells it, prefixes kept
  std::string state;      // kWeight, kModule, kStep, "exp_avg", "exp_avg_sq", or the optimizer's own key
  std::string stored;     // where it is, for people: "zero/fc1.weight/exp_avg.pt", "model.fc1.weight in .metadata"
  bool trainable = true;  // false: a buffer or a frozen parameter (no optimizer state expected)
  pt::DType dtype = pt::DType::F32;
  std::vector<int64_t> shape;
  pt::VirtualFile bytes;        // its elements, row-major, when it has bytes
  std::optional<double> value;  // a scalar kept in a pickle as a number (an int step): no bytes
  std::string unread;           // why its values are not read (a strided view); empty when they are
  // A param group's hyper-parameter (state "lr", "betas[0]", ...; param empty): the parameters its
  // group holds, shared by the group's items, by which diff matches groups across formats; and
  // the group's index in its own format, for the match diff says.
  Members members;
  int group = -1;
  uint64_t numel() const;
};

// A torch optimizer's numbering: per param group, in `params` order, each parameter's name (or
// "param <id>") and shape. Torch keys the state by these positions, counted across groups.
struct TorchParam {
  std::string name;
  std::vector<int64_t> shape;
};
using TorchOrder = std::vector<std::vector<TorchParam>>;

struct Input {
  std::string path;
  std::string kind;  // "deepspeed tag", "dcp folder", "safetensors", "universal folder", "files"
  // Whether the format keeps buffers and frozen parameters beside the trainable ones (a universal
  // folder keeps them in a copied model-state file, not as zero/ tensors).
  bool holds_others = true;
  // Whether the format can hold optimizer states at all: a weights file cannot, so a diff against
  // one compares weights only (and says so), where a DCP folder without moments has lost them.
  bool holds_optimizer = true;
  FileSet files;
  std::vector<Item> items;
  std::unique_ptr<ds::TagIndex> index;  // a DeepSpeed tag's
  // 'step' (and 'global_steps') values found in the pickles, with where, for the agreement check.
  std::vector<std::pair<std::string, double>> steps;
  // Whether the input keeps its param groups' hyper-parameters as items (diff compares them only
  // when both do), and the order its optimizer numbers parameters in (empty: unknown).
  bool holds_hypers = false;
  TorchOrder torch_order;
  // A torch optimizer.pt whose param groups name no parameters (torch < 2.6, or built from bare
  // tensors as the Trainer does): its items are "param <id>", and diff names them from the other
  // input's torch_order (check/torch_names.cpp). `torch_order` then holds the ids and shapes.
  bool unnamed_ids = false;
};

// Names the "param <id>" items of `unnamed` (Input::unnamed_ids) by `named`'s torch_order, where
// the two number the same parameters: as many groups, as many ids in each, each id's state of
// that parameter's shape (and of the shape of `unnamed`'s own weight of that name, when it keeps
// one). `said` gets the match, or why there is none (then the ids stay "param <id>").
bool name_torch_ids(Input& unnamed, const Input& named, std::string& said);

// Opens `path` (a DeepSpeed checkpoint or tag folder, a DCP folder, a safetensors file or folder,
// a universal folder, any folder or .pt file), running the structure checks into `f`. `tag`
// picks a DeepSpeed tag (default: the one `latest` names). Throws only when nothing can be read.
std::unique_ptr<Input> open_input(const std::string& path, const std::string& tag, Findings& f);

}  // namespace zm::check
