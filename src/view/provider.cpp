#include "zeromount/view/provider.h"

#include <spdlog/spdlog.h>

namespace zm::view {

bool ProviderContext::taken(const std::string& name) {
  if (!tree_.lookup(Tree::kRoot, name)) return false;
  spdlog::warn("{}: a real entry of that name exists; showing it instead of a made-up one", name);
  return true;
}

uint64_t ProviderContext::add_top_dir(const std::string& name, const char* kind, struct timespec mtime) {
  if (taken(name)) return 0;
  const uint64_t ino = tree_.add_dir(Tree::kRoot, name, mtime);
  tree_.mark_made_by(ino, kind);
  return ino;
}

uint64_t ProviderContext::add_top_text(const std::string& name, const char* kind, std::string text,
                                       struct timespec mtime) {
  if (taken(name)) return 0;
  const uint64_t ino = add_text(Tree::kRoot, name, std::move(text), mtime);
  tree_.mark_made_by(ino, kind);
  return ino;
}

uint64_t ProviderContext::add_real_file(uint64_t parent, const std::string& name, const std::string& path) {
  const uint32_t id = files_.add(path);
  const struct stat& st = files_.stat(id);
  const uint64_t size = uint64_t(st.st_size);
  return tree_.add_file(
      parent, name, st.st_mtim,
      [id, size] {
        pt::VirtualFile f;
        f.append_extent({id, 0, size});
        return f;
      },
      size);
}

uint64_t ProviderContext::add_text(uint64_t parent, const std::string& name, std::string text, struct timespec mtime) {
  const uint64_t size = text.size();
  return tree_.add_file(
      parent, name, mtime,
      [text = std::move(text)] {
        pt::VirtualFile f;
        f.append_inline(text);
        return f;
      },
      size);
}

}  // namespace zm::view
