#pragma once
// An open file of the view: what the FUSE adapter keeps per file handle and what `export` copies
// from. Its content is built once at open and shared with the view's cache.
#include <cstdint>
#include <memory>

#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/tree.h"

namespace zm::view {

class OpenFile {
 public:
  OpenFile(const Inode& inode, std::shared_ptr<const pt::VirtualFile> content, const pt::ExtentReader& files)
      : inode_(&inode), content_(std::move(content)), files_(&files) {}

  // Up to n bytes at `offset`; short only at the end of the file.
  size_t read(uint64_t offset, void* buf, size_t n) const { return content_->read(offset, buf, n, *files_); }
  uint64_t size() const { return content_->size(); }
  const Inode& inode() const { return *inode_; }
  const pt::VirtualFile& content() const { return *content_; }

 private:
  const Inode* inode_;
  std::shared_ptr<const pt::VirtualFile> content_;
  const pt::ExtentReader* files_;
};

}  // namespace zm::view
