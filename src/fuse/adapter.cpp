// The only file that includes libfuse. Each callback asks the View, which decides every answer,
// and translates: exceptions become an errno in one place (current_errno); nothing escapes.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <sys/statvfs.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>

#include "zeromount/fuse/adapter.h"
#include "zeromount/pt/error.h"

namespace zm::fuse {

namespace {

struct Context {
  const view::View* view;
};

const view::View& view_of(fuse_req_t req) {
  return *static_cast<const Context*>(fuse_req_userdata(req))->view;
}

// Whether this (inode, errno) was logged already: a refused read is retried by readahead and by
// the reader, and one line per file says all there is to say.
bool first_time(const view::Inode* n, int err) {
  static std::mutex mu;
  static std::set<std::pair<uint64_t, int>> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.size() >= 4096) seen.clear();  // bounded: inodes come and go (Tree::forget)
  return seen.emplace(n ? n->ino : 0, err).second;
}

// How loud a refusal is, by what it says (as mountpoint-s3 gives each error its level): what a
// caller asked that a read-only view never does is the caller's business; a source that changed
// under the mount is worth a warning; anything else (EIO, a broken file) is an error.
spdlog::level::level_enum level_of(int err) {
  switch (err) {
    case EROFS:
    case EISDIR:
    case ENOTDIR:
    case ENOENT:
    case EINVAL:
    case ELOOP:
    case EACCES:
    case EPERM:
    case EOPNOTSUPP:
      return spdlog::level::debug;
    case ESTALE:
      return spdlog::level::warn;
    default:
      return spdlog::level::err;
  }
}

// The errno of the exception in flight; logs it once with the path it concerns.
int current_errno(fuse_req_t req, const char* op, const view::Inode* n) noexcept {
  const std::string path = n ? view_of(req).describe(*n) : std::string("?");
  int err = EIO;
  std::string what;
  auto level = spdlog::level::err;
  try {
    throw;
  } catch (const Error& e) {
    err = e.errno_value();
    what = e.what();
    level = level_of(err);
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
    what = "out of memory";
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown error";
  }
  spdlog::log(first_time(n, err) ? level : spdlog::level::debug, "{} {}: {}", op, path, what);
  return err;
}

bool debugging() {
  return spdlog::should_log(spdlog::level::debug);
}

// Who sent a request about `n`: files that show each reader its own view are built for it. Only
// those ask for the caller's groups, which cost a read of /proc on every request.
view::Caller caller_of(fuse_req_t req, const view::Inode& n) {
  const fuse_ctx* c = fuse_req_ctx(req);
  view::Caller who{int(c->pid), c->uid, c->gid, {}};
  if (!n.is_file() || !n.file().build_for) return who;
  gid_t groups[64];
  const int count = fuse_req_getgroups(req, 64, groups);  // negative where /proc cannot tell
  if (count > 0) who.groups.assign(groups, groups + std::min(count, 64));
  return who;
}

fuse_entry_param entry(const view::View& v, const view::Inode& n, const view::Caller& who) {
  fuse_entry_param e{};
  e.ino = n.ino;
  e.generation = 1;
  e.attr = v.attr(n, who);
  e.entry_timeout = v.cache_seconds();
  e.attr_timeout = v.attr_seconds(n);
  return e;
}

void op_init(void* userdata, fuse_conn_info* conn) {
  // libfuse 3.14 derives max_pages from max_write.
  conn->max_write = view::kRequestBytes;
  conn->max_read = view::kRequestBytes;
  conn->max_background = 64;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Splice measured slower here than pread + fuse_reply_buf (docs/ARCHITECTURE.md).
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const view::View& v = view_of(req);
  try {
    const view::Inode* n = v.lookup(parent, name, true);  // the reply gives the kernel a reference
    if (debugging()) {
      const view::Inode* p = v.tree().get(parent);
      spdlog::debug("lookup {}/{}: {}", p ? v.describe(*p) : "?", name,
                    n ? "inode " + std::to_string(n->ino) : "ENOENT");
    }
    fuse_entry_param e{};  // ino 0: a negative entry, cached as long as the view allows
    if (n) {
      try {
        e = entry(v, *n, caller_of(req, *n));
      } catch (...) {
        v.forget(n->ino, 1);  // not given to the kernel after all
        throw;
      }
    } else {
      e.entry_timeout = v.negative_seconds(v.inode(parent));
    }
    fuse_reply_entry(req, &e);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "lookup", v.tree().get(parent)));
  }
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  const view::View& v = view_of(req);
  try {
    const view::Inode& n = v.inode(ino);
    struct stat st = v.attr(n, caller_of(req, n));
    fuse_reply_attr(req, &st, v.attr_seconds(n));
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "getattr", v.tree().get(ino)));
  }
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  const view::View& v = view_of(req);
  try {
    const std::string target = v.readlink(v.inode(ino));
    fuse_reply_readlink(req, target.c_str());
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "readlink", v.tree().get(ino)));
  }
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const view::View& v = view_of(req);
  try {
    const view::Inode& n = v.inode(ino);
    v.open_dir(n);
    fi->keep_cache = fi->cache_readdir = v.listing_cached(n);
    fuse_reply_open(req, fi);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "opendir", v.tree().get(ino)));
  }
}

template <bool Plus>
void readdir_impl(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off) {
  const view::View& v = view_of(req);
  try {
    const view::Inode& dir = v.inode(ino);
    std::string buf(size, '\0');
    size_t used = 0;
    // readdirplus gives the kernel a reference to every entry with attributes but . and ..: each
    // entry is taken with one (dir_entry's `ref`), which is given back unless it is sent so.
    for (auto e = v.dir_entry(dir, uint64_t(off), Plus); e; e = v.dir_entry(dir, e->next, Plus)) {
      const std::string name(e->name);
      const bool held = Plus && name != "." && name != "..";
      bool referenced = false;
      size_t len;
      try {
        if constexpr (Plus) {
          // The size first: attributes of an entry that does not fit would be computed for nothing.
          if (fuse_add_direntry_plus(req, nullptr, 0, name.c_str(), nullptr, 0) > size - used) {
            if (held) v.forget(e->node->ino, 1);
            break;
          }
          fuse_entry_param p{};  // ino 0: no attributes; the kernel looks the entry up when asked
          if (held && v.attr_ready(*e->node)) {
            p = entry(v, *e->node, caller_of(req, *e->node));
            referenced = true;
          } else {
            p.attr.st_ino = e->node->ino;
            p.attr.st_mode = S_IFREG;
          }
          len = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &p, off_t(e->next));
        } else {
          struct stat st {};
          st.st_ino = e->node->ino;
          st.st_mode = e->node->is_dir() ? S_IFDIR : e->node->link() ? S_IFLNK : S_IFREG;
          len = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st, off_t(e->next));
        }
      } catch (...) {
        if (held) v.forget(e->node->ino, 1);
        throw;
      }
      if (held && !referenced) v.forget(e->node->ino, 1);  // e->node may be gone from here on
      if (len > size - used) break;
      used += len;
    }
    fuse_reply_buf(req, buf.data(), used);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "readdir", v.tree().get(ino)));
  }
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  readdir_impl<false>(req, ino, size, off);
}
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  readdir_impl<true>(req, ino, size, off);
}

// The handle of an open file is its OpenFile's address, as fuse-archive keeps it.
static_assert(sizeof(fuse_file_info::fh) >= sizeof(view::OpenFile*), "fi->fh must hold a pointer");

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const view::View& v = view_of(req);
  try {
    const view::Inode& n = v.inode(ino);
    auto h = std::make_unique<view::OpenFile>(v.open(n, fi->flags, caller_of(req, n)));
    if (debugging())
      spdlog::debug("open {}: {} bytes in {} segments", v.describe(h->inode()), h->size(),
                    h->content().segments().size());
    fi->fh = reinterpret_cast<uint64_t>(h.get());
    // The bytes never change while mounted (live files aside): let the page cache serve repeats.
    fi->direct_io = v.direct_io(h->inode());
    fi->keep_cache = !fi->direct_io;
    if (fuse_reply_open(req, fi) == 0) h.release();
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "open", v.tree().get(ino)));
  }
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  const auto* h = reinterpret_cast<const view::OpenFile*>(fi->fh);
  try {
    if (off < 0) throw Error("read at a negative offset", EINVAL);  // FUSE passes the caller's off_t through
    thread_local std::string buf;  // one per worker thread, reused: no allocation per request
    if (buf.size() < size) buf.resize(size);
    const size_t n = h->read(uint64_t(off), buf.data(), size);
    if (debugging())
      spdlog::debug("read {} [{}, +{}): {}", view_of(req).describe(h->inode()), off, size,
                    h->content().describe(uint64_t(off), n));
    fuse_reply_buf(req, buf.data(), n);
  } catch (...) {
    fuse_reply_err(req, current_errno(req, "read", &h->inode()));
  }
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete reinterpret_cast<view::OpenFile*>(fi->fh);
  fuse_reply_err(req, 0);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  view_of(req).forget(ino, nlookup);
  fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t k = 0; k < count; ++k) view_of(req).forget(forgets[k].ino, forgets[k].nlookup);
  fuse_reply_none(req);
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  const view::FsStats f = view_of(req).statfs();
  struct statvfs s {};
  s.f_bsize = s.f_frsize = f.block_size;
  s.f_blocks = f.blocks;
  s.f_files = f.files;
  s.f_ffree = s.f_favail = f.files_free;
  s.f_namemax = f.name_max;
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

// libfuse's own messages ("failed to open /dev/fuse: Permission denied", fusermount3's reasons)
// go to our log; the last one is kept so that a failed mount can say why.
std::mutex g_fuse_message_mu;  // libfuse may log from any worker thread
std::string g_last_fuse_message;

void log_from_libfuse(enum fuse_log_level level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  std::string msg = buf;
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (level <= FUSE_LOG_ERR) {
    std::lock_guard<std::mutex> lock(g_fuse_message_mu);
    g_last_fuse_message = msg;
  }
  if (level <= FUSE_LOG_ERR)
    spdlog::error("libfuse: {}", msg);
  else if (level <= FUSE_LOG_NOTICE)
    spdlog::info("libfuse: {}", msg);
  else
    spdlog::debug("libfuse: {}", msg);
}

std::string because() {
  return g_last_fuse_message.empty() ? "" : ": " + g_last_fuse_message;
}

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.readlink = op_readlink;
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

// Asks the kernel to let go of the entries the view made on demand beyond view::kMadeKept (each
// invalidated entry the kernel does not use is forgotten, and the FORGET drops it), from a thread
// of its own: an invalidation from inside a request on the same folder could wait on itself.
class Reaper {
 public:
  Reaper(const view::View& v, fuse_session* se) : thread_([this, &v, se] { run(v, se); }) {}
  ~Reaper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

 private:
  void run(const view::View& v, fuse_session* se) {
    std::unique_lock<std::mutex> lock(mu_);
    size_t let_go = 0;
    while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; })) {
      lock.unlock();
      const auto surplus = v.surplus();
      for (const auto& [dir, name] : surplus)
        fuse_lowlevel_notify_inval_entry(se, dir, name.c_str(), name.size());  // ENOENT: already gone
      // What the kernel let go is freed; give the pages back too (RSS stayed at its
      // peak after a walk of many made-up entries), now and then, not on every small release.
      if ((let_go += surplus.size()) >= 4096) {
        malloc_trim(0);
        let_go = 0;
      }
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

namespace {

// The arguments a session is made with: ours first, then the user's -o options.
struct SessionArgs {
  SessionArgs(const std::vector<std::string>& options, const std::string& fsname, bool debug) {
    strings.push_back("zeromount");
    if (debug) strings.push_back("-d");
    // max_read must match what init() asks for, or libfuse refuses the session.
    std::string opts = "ro,default_permissions,max_read=" + std::to_string(view::kRequestBytes) +
                       ",subtype=zeromount,fsname=" + fsname;
    for (const auto& o : options) opts += "," + o;
    strings.push_back("-o");
    strings.push_back(opts);
    for (auto& s : strings) argv.push_back(s.data());
    args = FUSE_ARGS_INIT(int(argv.size()), argv.data());
  }
  ~SessionArgs() { fuse_opt_free_args(&args); }
  std::vector<std::string> strings;
  std::vector<char*> argv;
  fuse_args args;
};

std::string g_option_messages;  // option_problem() runs before any thread does
void collect_libfuse(enum fuse_log_level, const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  for (const char* c = buf; *c; ++c) g_option_messages += *c == '\n' ? ' ' : *c;
}

}  // namespace

std::string option_problem(const std::vector<std::string>& options) {
  for (const auto& o : options)
    if (o.starts_with("max_read="))  // the kernel's requests must match the view's buffers
      return "-o " + o + ": zeromount sets max_read itself (" + std::to_string(view::kRequestBytes) + ")";
  SessionArgs a(options, "check", false);
  const fuse_lowlevel_ops ops = make_ops();
  g_option_messages.clear();
  fuse_set_log_func(collect_libfuse);
  fuse_session* se = fuse_session_new(&a.args, &ops, sizeof ops, nullptr);
  fuse_set_log_func(log_from_libfuse);
  if (se) {
    fuse_session_destroy(se);
    return "";
  }
  std::string why = g_option_messages;
  while (!why.empty() && why.back() == ' ') why.pop_back();
  return why.empty() ? "libfuse refuses these -o options" : "libfuse: " + why;
}

int serve(const view::View& v, const MountConfig& cfg, const std::function<void(const std::string&)>& mounted) {
  v.start_serving();
  SessionArgs a(cfg.options, cfg.fsname, cfg.debug);
  Context context{&v};
  const fuse_lowlevel_ops ops = make_ops();
  fuse_set_log_func(log_from_libfuse);
  fuse_session* se = fuse_session_new(&a.args, &ops, sizeof ops, &context);
  if (!se) {
    mounted("cannot create a FUSE session (bad -o option?)" + because());
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
    mounted("cannot mount on " + cfg.mountpoint + because());
    return 1;
  }
  mounted("");
  fuse_loop_config* lc = fuse_loop_cfg_create();
  if (cfg.threads) fuse_loop_cfg_set_max_threads(lc, cfg.threads);
  fuse_loop_cfg_set_clone_fd(lc, 0);
  int rc;
  {
    Reaper reaper(v, se);
    rc = fuse_session_loop_mt(se, lc);
  }
  fuse_loop_cfg_destroy(lc);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc < 0 ? 1 : 0;
}

}  // namespace zm::fuse
