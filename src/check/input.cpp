// Which kind of checkpoint a path is, in the order the issue ranks them: a DeepSpeed tag or
// checkpoint folder, a DCP folder, then anything else file by file (safetensors, universal, .pt).
#include <sys/stat.h>

#include <filesystem>

#include "readers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace fs = std::filesystem;

uint32_t FileSet::add(const std::string& path) {
  for (size_t k = 0; k < files_.size(); ++k)
    if (files_[k]->path() == path) return uint32_t(k);
  files_.push_back(std::make_unique<pt::File>(path));
  return uint32_t(files_.size() - 1);
}

void FileSet::pread(uint32_t file, uint64_t offset, void* buf, size_t n) const {
  files_.at(file)->read_exact(offset, buf, n, "tensor bytes");
}

uint64_t Item::numel() const {
  return pt::numel(shape);
}

std::unique_ptr<Input> open_input(const std::string& path, const std::string& tag, Findings& f) {
  auto in = std::make_unique<Input>();
  in->path = path;
  f.input = path;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error(path + ": no such file or folder", ENOENT);
  if (fs::is_directory(st) && fs::exists(fs::path(path) / ".metadata")) {
    in->kind = "dcp folder";
    read_dcp(path, *in, f);
  } else if (fs::is_directory(st) && [&] {
               const ds::CheckpointDir d = ds::scan_checkpoint(path);
               return d.root_is_tag || !d.tags.empty();
             }()) {
    in->kind = "deepspeed checkpoint";
    read_deepspeed(path, tag, *in, f);
  } else {
    if (!tag.empty())
      throw Error(path + ": --tag " + tag + ": not a DeepSpeed checkpoint folder (no tag folders)", EINVAL);
    read_files(path, *in, f);
  }
  f.kind = in->kind;
  return in;
}

}  // namespace zm::check
