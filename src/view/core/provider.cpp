#include "zeromount/view/provider.h"

#include <spdlog/spdlog.h>

namespace zm::view {

Access access_of(const struct stat& st) {
  return {uint32_t(st.st_mode) & 0555u, st.st_uid, st.st_gid, true};
}

bool ProviderContext::taken(const std::string& name) {
  const Inode* had = tree_.lookup(dir(), name);
  if (!had) return false;
  if (had->made_by)
    spdlog::warn("{}/{}: already a made-up {} folder; not made again", folder_.path(), name, had->made_by->kind());
  else
    spdlog::warn("{}/{}: a real entry of that name exists; showing it instead of a made-up one", folder_.path(), name);
  return true;
}

Access least_of(const std::vector<Access>& all) {
  Access a;
  for (const Access& x : all) {
    if (!a.set) {
      a = x;
      continue;
    }
    // The kernel takes the first class that matches (owner, group, others), so a user of one of
    // a's classes may fall in another class of x: each class of a keeps only what every class of
    // x that its users may fall in grants.
    const uint32_t owner = (x.perm >> 6) & 7, group = (x.perm >> 3) & 7, other = x.perm & 7;
    uint32_t o = (a.perm >> 6) & 7, g = (a.perm >> 3) & 7, w = a.perm & 7;
    if (x.uid == a.uid) {
      o &= owner;
    } else {
      o = 0;       // another owner: the owner class may not read both
      g &= owner;  // x's owner may be in a's group, or among a's others
      w &= owner;
    }
    if (x.gid == a.gid) {
      g &= group;
    } else {
      g = 0;
      w &= group;  // a's others may be in x's group
    }
    w &= other;
    a.perm = (a.perm & ~0777u) | o << 6 | g << 3 | w;
  }
  return a;
}

uint64_t ProviderContext::add_made_dir(const std::string& name, const Provider& by,
                                       const std::vector<const MountedTag*>& from) {
  if (taken(name)) return 0;
  const uint64_t ino = tree_.add_dir(dir(), name, mtime());
  tree_.mark_made_by(ino, by);
  std::vector<Access> folders, files;
  for (const MountedTag* t : from) {
    folders.push_back(t->folder);
    files.push_back(t->files);
  }
  Access dir = least_of(folders), file = least_of(files);
  dir.perm &= 0555;
  file.perm &= 0444;
  tree_.set_access(ino, dir, file);
  return ino;
}

uint64_t ProviderContext::add_made_text(const std::string& name, const Provider& by, std::function<std::string()> text,
                                        Access access) {
  if (taken(name)) return 0;
  return made_file(add_live_text(dir(), name, std::move(text), mtime()), by, access);
}

uint64_t ProviderContext::add_made_live_file(const std::string& name, const Provider& by, Builder build, Sizer sizer,
                                             Access access, bool costly) {
  if (taken(name)) return 0;
  const uint64_t ino = tree_.add_live_file(dir(), name, mtime(), std::move(build));
  tree_.set_sizer(ino, std::move(sizer), costly);
  return made_file(ino, by, access);
}

uint64_t ProviderContext::made_file(uint64_t ino, const Provider& by, Access access) {
  tree_.mark_made_by(ino, by);
  access.perm &= 0444;
  tree_.set_access(ino, access);
  return ino;
}

uint64_t add_real_file(Tree& tree, FileTable& files, uint64_t parent, const std::string& name,
                       const std::string& path) {
  const uint32_t id = files.add(path);
  const struct stat& st = files.stat(id);
  const uint64_t size = uint64_t(st.st_size);
  const uint64_t ino = tree.add_file(
      parent, name, st.st_mtim,
      [id, size] {
        pt::VirtualFile f;
        f.append_extent({id, 0, size});
        return f;
      },
      size);
  tree.set_access(ino, access_of(st));
  return ino;
}

uint64_t add_text(Tree& tree, uint64_t parent, const std::string& name, std::string text, struct timespec mtime) {
  const uint64_t size = text.size();
  return tree.add_file(
      parent, name, mtime,
      [text = std::move(text)] {
        pt::VirtualFile f;
        f.append_inline(text);
        return f;
      },
      size);
}

uint64_t add_live_text(Tree& tree, uint64_t parent, const std::string& name, std::function<std::string()> text,
                       struct timespec mtime) {
  return tree.add_live_file(parent, name, mtime, [text = std::move(text)] {
    pt::VirtualFile f;
    f.append_inline(text());
    return f;
  });
}

void copy_real_entries(Tree& tree, const CheckpointFolder& folder, uint64_t parent,
                       const std::function<bool(const Inode&)>& keep) {
  std::vector<const Inode*> real;
  for (uint64_t c : tree.get(folder.ino())->folder().children) {
    const Inode& n = *tree.get(c);
    if (n.made_by || n.is_live() || (n.is_dir() && n.folder().real.empty()) || folder.is_tag(n.name) || !keep(n))
      continue;
    real.push_back(&n);
  }
  for (const Inode* n : real) tree.add_copy(parent, *n);
}

std::string relative_to(const std::string& root, std::string text) {
  const std::string prefix = root + "/";
  for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
  return text;
}

}  // namespace zm::view
