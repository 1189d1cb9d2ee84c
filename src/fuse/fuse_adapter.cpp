// The only file that includes libfuse. Each callback looks up the inode in the View, delegates,
// and maps exceptions to an errno in one place (fuse-archive's pattern); nothing escapes to libfuse.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>

#include <sys/statvfs.h>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "zeromount/fuse/adapter.h"
#include "zeromount/pt/error.h"

namespace zm::fuse {

namespace {

struct Context {
  const view::View* view;
  double timeout;
};

const Context& ctx(fuse_req_t req) {
  return *static_cast<const Context*>(fuse_req_userdata(req));
}

// An open file: its content, built once, shared with the view's cache.
struct Handle {
  std::shared_ptr<const pt::VirtualFile> content;
  const view::Inode* inode;
};

// The errno of the exception in flight; logs it with the path it concerns.
int current_errno(fuse_req_t req, const char* op, const view::Inode* n) noexcept {
  const std::string path = n ? ctx(req).view->describe(*n) : std::string("?");
  try {
    throw;
  } catch (const Error& e) {
    spdlog::warn("{} {}: {}", op, path, e.what());
    return e.errno_value();
  } catch (const std::bad_alloc&) {
    spdlog::error("{} {}: out of memory", op, path);
    return ENOMEM;
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", op, path, e.what());
    return EIO;
  } catch (...) {
    spdlog::error("{} {}: unknown error", op, path);
    return EIO;
  }
}

const view::Inode& node(fuse_req_t req, fuse_ino_t ino) {
  const view::Inode* n = ctx(req).view->tree().get(ino);
  if (!n) throw Error("no such inode " + std::to_string(ino), ENOENT);
  return *n;
}

fuse_entry_param entry(fuse_req_t req, const view::Inode& n) {
  fuse_entry_param e{};
  e.ino = n.ino;
  e.generation = 1;
  e.attr = ctx(req).view->attr(n);
  e.attr_timeout = e.entry_timeout = ctx(req).timeout;
  return e;
}

void op_init(void* userdata, fuse_conn_info* conn) {
  // Ask for 1 MiB requests where the kernel allows them (libfuse 3.14 derives max_pages from max_write).
  conn->max_write = 1 << 20;
  conn->max_read = 1 << 20;
  conn->max_background = 64;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Splice measured slower here than pread + fuse_reply_buf (docs/ARCHITECTURE.md, platform §2.4).
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const view::Inode* n = nullptr;
  try {
    n = ctx(req).view->tree().lookup(parent, name);
    if (!n) {
      fuse_entry_param e{};  // ino 0: a negative entry the kernel may cache as long as positive ones
      e.entry_timeout = ctx(req).timeout;
      fuse_reply_entry(req, &e);
      return;
    }
    fuse_entry_param e = entry(req, *n);
    fuse_reply_entry(req, &e);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "lookup", n));
  }
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const view::Inode* n = nullptr;
  try {
    n = &node(req, ino);
    struct stat st = ctx(req).view->attr(*n);
    fuse_reply_attr(req, &st, ctx(req).timeout);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "getattr", n));
  }
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  try {
    if (!node(req, ino).dir) throw Error("not a folder", ENOTDIR);
    fi->keep_cache = 1;
    fi->cache_readdir = 1;
    fuse_reply_open(req, fi);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "opendir", nullptr));
  }
}

template <bool Plus>
void readdir_impl(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  const view::Inode* dir = nullptr;
  try {
    dir = &node(req, ino);
    const view::View& v = *ctx(req).view;
    std::string buf(size, '\0');
    size_t used = 0;
    // Offsets: 1 is ".", 2 is "..", 3 + k is children[k].
    for (off_t k = off; k < off_t(dir->children.size()) + 2; ++k) {
      const view::Inode* n = k == 0   ? dir
                             : k == 1 ? v.tree().get(dir->parent)
                                      : v.tree().get(dir->children[size_t(k - 2)]);
      const char* name = k == 0 ? "." : k == 1 ? ".." : n->name.c_str();
      size_t len;
      if constexpr (Plus) {
        fuse_entry_param e = entry(req, *n);
        len = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, k + 1);
      } else {
        struct stat st {};
        st.st_ino = n->ino;
        st.st_mode = n->dir ? S_IFDIR : S_IFREG;
        len = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, k + 1);
      }
      if (len > size - used) break;
      used += len;
    }
    fuse_reply_buf(req, buf.data(), used);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "readdir", dir));
  }
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  readdir_impl<false>(req, ino, size, off);
}
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  readdir_impl<true>(req, ino, size, off);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const view::Inode* n = nullptr;
  try {
    n = &node(req, ino);
    if (n->dir) throw Error("is a folder", EISDIR);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) throw Error("read-only view", EROFS);
    auto h = std::make_unique<Handle>(Handle{ctx(req).view->content(*n), n});
    fi->fh = reinterpret_cast<uint64_t>(h.get());
    fi->keep_cache = 1;  // the bytes never change while mounted: let the page cache serve repeats
    if (fuse_reply_open(req, fi) == 0) h.release();
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "open", n));
  }
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const Handle*>(fi->fh);
  try {
    thread_local std::string buf;  // one per worker thread, reused: no allocation per request
    if (buf.size() < size) buf.resize(size);
    const size_t n = ctx(req).view->read(*h->content, uint64_t(off), buf.data(), size);
    fuse_reply_buf(req, buf.data(), n);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "read", h->inode));
  }
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<Handle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  struct statvfs s {};
  s.f_bsize = s.f_frsize = 4096;
  s.f_files = ctx(req).view->tree().size();
  s.f_namemax = 255;
  s.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &s);
}

void erofs(fuse_req_t req) {
  fuse_reply_err(req, EROFS);
}
void op_setattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) {
  erofs(req);
}
void op_mknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) {
  erofs(req);
}
void op_mkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) {
  erofs(req);
}
void op_unlink(fuse_req_t req, fuse_ino_t, const char*) {
  erofs(req);
}
void op_symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) {
  erofs(req);
}
void op_rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  erofs(req);
}
void op_link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) {
  erofs(req);
}
void op_write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
  erofs(req);
}
void op_setxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
  erofs(req);
}
void op_removexattr(fuse_req_t req, fuse_ino_t, const char*) {
  erofs(req);
}
void op_create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) {
  erofs(req);
}
void op_fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) {
  erofs(req);
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.statfs = op_statfs;
  ops.setattr = op_setattr;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.unlink = op_unlink;
  ops.rmdir = op_unlink;
  ops.symlink = op_symlink;
  ops.rename = op_rename;
  ops.link = op_link;
  ops.write = op_write;
  ops.setxattr = op_setxattr;
  ops.removexattr = op_removexattr;
  ops.create = op_create;
  ops.fallocate = op_fallocate;
  return ops;
}

}  // namespace

int serve(const view::View& v, const MountConfig& cfg, const std::function<void(const std::string&)>& mounted) {
  std::vector<std::string> argv_s{"zeromount"};
  if (cfg.debug) argv_s.push_back("-d");
  // max_read must match what init() asks for, or libfuse refuses the session.
  std::string opts = "ro,default_permissions,max_read=1048576,subtype=zeromount,fsname=" + cfg.fsname;
  for (const auto& o : cfg.options) opts += "," + o;
  argv_s.push_back("-o");
  argv_s.push_back(opts);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(int(argv.size()), argv.data());
  Context context{&v, cfg.timeout};
  const fuse_lowlevel_ops ops = make_ops();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, &context);
  if (!se) {
    mounted("cannot create a FUSE session (bad -o option?)");
    return 1;
  }
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    mounted("cannot install signal handlers");
    return 1;
  }
  if (fuse_session_mount(se, cfg.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    mounted("cannot mount on " + cfg.mountpoint + " (is /dev/fuse available, and the folder empty and not mounted?)");
    return 1;
  }
  mounted("");
  fuse_loop_config* lc = fuse_loop_cfg_create();
  if (cfg.threads) fuse_loop_cfg_set_max_threads(lc, cfg.threads);
  fuse_loop_cfg_set_clone_fd(lc, 0);
  const int rc = fuse_session_loop_mt(se, lc);
  fuse_loop_cfg_destroy(lc);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc < 0 ? 1 : 0;
}

}  // namespace zm::fuse
