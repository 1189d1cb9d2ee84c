#pragma once
// An open file of the view: what the FUSE adapter keeps per file handle and what `export` copies
// from. Its content is built once at open and shared with the view's cache.
#include <atomic>
#include <cstdint>
#include <memory>

#include "zeromount/pt/virtual_file.h"
#include "zeromount/view/tree.h"

namespace zm::view {

// What one reading process took from the shards, for .zeromount/stats.
struct ReaderCount {
  std::atomic<uint64_t> bytes{0}, requests{0};
};

class OpenFile {
 public:
  OpenFile(const Inode& inode, std::shared_ptr<const pt::VirtualFile> content, const pt::ExtentReader& files,
           ReaderCount* count = nullptr)
      : inode_(&inode), content_(std::move(content)), files_(files, count) {
    inode.opens.fetch_add(1, std::memory_order_relaxed);
  }
  OpenFile(OpenFile&& o) noexcept : inode_(o.inode_), content_(std::move(o.content_)), files_(o.files_) {
    o.inode_ = nullptr;
  }
  OpenFile& operator=(OpenFile&&) = delete;
  // An open file keeps its inode: the tree does not forget it (Tree::forget) while it is open.
  ~OpenFile() {
    if (inode_) inode_->opens.fetch_sub(1, std::memory_order_relaxed);
  }

  // Up to n bytes at `offset`; short only at the end of the file.
  size_t read(uint64_t offset, void* buf, size_t n) const {
    if (files_.count) files_.count->requests.fetch_add(1, std::memory_order_relaxed);
    return content_->read(offset, buf, n, files_);
  }
  uint64_t size() const { return content_->size(); }
  const Inode& inode() const { return *inode_; }
  const pt::VirtualFile& content() const { return *content_; }

 private:
  // The view's files, counting what this reader takes from them.
  struct Counted final : pt::ExtentReader {
    Counted(const pt::ExtentReader& in, ReaderCount* c) : files(&in), count(c) {}
    void pread(uint32_t file, uint64_t offset, void* buf, size_t n) const override {
      files->pread(file, offset, buf, n);
      if (count) count->bytes.fetch_add(n, std::memory_order_relaxed);
    }
    const pt::ExtentReader* files;
    ReaderCount* count;
  };
  const Inode* inode_;
  std::shared_ptr<const pt::VirtualFile> content_;
  Counted files_;
};

}  // namespace zm::view
