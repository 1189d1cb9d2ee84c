// benchfs: minimal read-only libfuse3 low-level filesystem for measuring FUSE overhead.
//
// Layout:
//   /data0 .. /data{N-1}  each exposes the whole --backing file (read via pread or splice)
//   /d/f00000 ..          --dir-entries synthesized small files (4 KiB, content generated)
//   /.stats               read => read-size histogram + counters since last read (then reset)
// or, with --tree=DIR, the files and folders of DIR (a plain read-only passthrough: the floor of
// a real checkpoint folder read through FUSE, served the way the data files are)
//
// Build: g++ -O2 -std=c++17 benchfs.cpp $(pkg-config --cflags --libs fuse3) -o benchfs
// Usage: benchfs MOUNTPOINT (--backing=FILE | --tree=DIR) [--mode=splice|fdcopy|copy] [--direct_io] [--keep_cache]
//        [--files=2] [--dir-entries=10000] [--entry_timeout=S] [--attr_timeout=S]
//        [--max_read=N] [--no_readdirplus] [-s] [-f] [-o opts] [-o clone_fd] [-o max_threads=N]
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct Options {
  const char* backing = nullptr;
  const char* tree = nullptr;
  const char* mode = nullptr;  // fuse_opt "%s" frees the previous value: no literal default
  int direct_io = 0;
  int keep_cache = 0;
  int files = 2;
  int dir_entries = 10000;
  double entry_timeout = 1.0;
  double attr_timeout = 1.0;
  unsigned max_read = 0;
  unsigned max_readahead = 0;
  int no_readdirplus = 0;
  int no_splice_move = 0;
};

Options g_opt;
int g_fd = -1;
off_t g_size = 0;
enum class Mode { Splice, FdCopy, Copy } g_mode = Mode::Splice;

constexpr fuse_ino_t kRoot = 1;
constexpr fuse_ino_t kDir = 2;
constexpr fuse_ino_t kStats = 3;
constexpr fuse_ino_t kData0 = 10;     // data files: 10 .. 10+files-1
constexpr fuse_ino_t kEntry0 = 1000;  // small files in /d
constexpr size_t kSmallSize = 4096;

// Read-size histogram: bucket i counts reads with size in (2^(i-1), 2^i]
std::atomic<unsigned long> g_hist[32];
std::atomic<unsigned long> g_reads{0}, g_bytes{0}, g_lookups{0}, g_getattrs{0}, g_readdirs{0}, g_readdirplus{0},
    g_opens{0};
std::atomic<int> g_inflight{0}, g_max_inflight{0};
std::string g_init_info;

#define OPT(t, p) \
  { t, offsetof(Options, p), 1 }
const struct fuse_opt kOptSpec[] = {{"--backing=%s", offsetof(Options, backing), 0},
                                    {"--tree=%s", offsetof(Options, tree), 0},
                                    {"--mode=%s", offsetof(Options, mode), 0},
                                    OPT("--direct_io", direct_io),
                                    OPT("--keep_cache", keep_cache),
                                    {"--files=%d", offsetof(Options, files), 0},
                                    {"--dir-entries=%d", offsetof(Options, dir_entries), 0},
                                    {"--entry_timeout=%lf", offsetof(Options, entry_timeout), 0},
                                    {"--attr_timeout=%lf", offsetof(Options, attr_timeout), 0},
                                    {"--max_read=%u", offsetof(Options, max_read), 0},
                                    {"--max_readahead=%u", offsetof(Options, max_readahead), 0},
                                    OPT("--no_readdirplus", no_readdirplus),
                                    OPT("--no_splice_move", no_splice_move),
                                    FUSE_OPT_END};

bool is_data(fuse_ino_t ino) {
  return ino >= kData0 && ino < kData0 + (fuse_ino_t)g_opt.files;
}
bool is_entry(fuse_ino_t ino) {
  return ino >= kEntry0 && ino < kEntry0 + (fuse_ino_t)g_opt.dir_entries;
}

bool fill_stat(fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_uid = getuid();
  st->st_gid = getgid();
  st->st_mtime = st->st_ctime = st->st_atime = 1700000000;
  if (ino == kRoot || ino == kDir) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
  } else if (ino == kStats) {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = 4096;
  } else if (is_data(ino)) {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = g_size;
  } else if (is_entry(ino)) {
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = kSmallSize;
  } else {
    return false;
  }
  st->st_blksize = 4096;
  st->st_blocks = (st->st_size + 511) / 512;
  return true;
}

std::string entry_name(int i) {
  char b[16];
  std::snprintf(b, sizeof b, "f%05d", i);
  return b;
}

void reply_entry(fuse_req_t req, fuse_ino_t ino) {
  struct fuse_entry_param e;
  std::memset(&e, 0, sizeof e);
  e.ino = ino;
  e.attr_timeout = g_opt.attr_timeout;
  e.entry_timeout = g_opt.entry_timeout;
  fill_stat(ino, &e.attr);
  fuse_reply_entry(req, &e);
}

void op_init(void*, struct fuse_conn_info* conn) {
  char b[1024];
  std::snprintf(b, sizeof b,
                "kernel_proto=%u.%u max_write=%u max_read=%u max_readahead=%u "
                "max_background=%u congestion=%u capable=0x%x want(default)=0x%x "
                "splice_write_cap=%d splice_move_cap=%d splice_read_cap=%d readdirplus_cap=%d "
                "async_read=%d parallel_dirops=%d",
                conn->proto_major, conn->proto_minor, conn->max_write, conn->max_read, conn->max_readahead,
                conn->max_background, conn->congestion_threshold, conn->capable, conn->want,
                !!(conn->capable & FUSE_CAP_SPLICE_WRITE), !!(conn->capable & FUSE_CAP_SPLICE_MOVE),
                !!(conn->capable & FUSE_CAP_SPLICE_READ), !!(conn->capable & FUSE_CAP_READDIRPLUS),
                !!(conn->capable & FUSE_CAP_ASYNC_READ), !!(conn->capable & FUSE_CAP_PARALLEL_DIROPS));
  g_init_info = b;
  if (g_mode == Mode::Splice) {
    conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (!g_opt.no_splice_move) conn->want |= FUSE_CAP_SPLICE_MOVE;
  } else {
    conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  }
  if (g_opt.no_readdirplus) conn->want &= ~(FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO);
  if (g_opt.max_read) conn->max_read = g_opt.max_read;
  if (g_opt.max_readahead) conn->max_readahead = g_opt.max_readahead;
  std::snprintf(b, sizeof b, " | final want=0x%x max_read=%u max_readahead=%u", conn->want, conn->max_read,
                conn->max_readahead);
  g_init_info += b;
  std::fprintf(stderr, "benchfs init: %s\n", g_init_info.c_str());
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  g_lookups++;
  if (parent == kRoot) {
    if (!std::strcmp(name, "d")) return reply_entry(req, kDir);
    if (!std::strcmp(name, ".stats")) return reply_entry(req, kStats);
    if (!std::strncmp(name, "data", 4)) {
      char* end;
      long i = std::strtol(name + 4, &end, 10);
      if (*end == 0 && end != name + 4 && i >= 0 && i < g_opt.files) return reply_entry(req, kData0 + i);
    }
  } else if (parent == kDir && name[0] == 'f' && std::strlen(name) == 6) {
    char* end;
    long i = std::strtol(name + 1, &end, 10);
    if (*end == 0 && i >= 0 && i < g_opt.dir_entries) return reply_entry(req, kEntry0 + i);
  }
  fuse_reply_err(req, ENOENT);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  g_getattrs++;
  struct stat st;
  if (!fill_stat(ino, &st)) return (void)fuse_reply_err(req, ENOENT);
  fuse_reply_attr(req, &st, g_opt.attr_timeout);
}

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  g_opens++;
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return (void)fuse_reply_err(req, EROFS);
  if (ino == kStats) {
    fi->direct_io = 1;
  } else if (is_data(ino) || is_entry(ino)) {
    fi->direct_io = g_opt.direct_io;
    fi->keep_cache = g_opt.keep_cache;
  } else {
    return (void)fuse_reply_err(req, EISDIR);
  }
  fuse_reply_open(req, fi);
}

std::string stats_text() {
  std::string s = "init: " + g_init_info + "\n";
  char b[256];
  std::snprintf(b, sizeof b,
                "reads=%lu bytes=%lu max_inflight=%d lookups=%lu getattrs=%lu opens=%lu "
                "readdir=%lu readdirplus=%lu\nhist:",
                g_reads.exchange(0), g_bytes.exchange(0), g_max_inflight.exchange(0), g_lookups.exchange(0),
                g_getattrs.exchange(0), g_opens.exchange(0), g_readdirs.exchange(0), g_readdirplus.exchange(0));
  s += b;
  for (int i = 0; i < 32; i++) {
    unsigned long c = g_hist[i].exchange(0);
    if (c) {
      std::snprintf(b, sizeof b, " <=%luK:%lu", (1ul << i) / 1024, c);
      s += b;
    }
  }
  s += "\n";
  return s;
}

thread_local std::vector<char> t_buf;

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  if (ino == kStats) {
    std::string s = off == 0 ? stats_text() : std::string();
    return (void)fuse_reply_buf(req, s.data(), std::min(size, s.size()));
  }
  if (is_entry(ino)) {
    if (off >= (off_t)kSmallSize) return (void)fuse_reply_buf(req, nullptr, 0);
    size_t n = std::min(size, kSmallSize - (size_t)off);
    if (t_buf.size() < n) t_buf.resize(n);
    std::memset(t_buf.data(), 'a' + (ino % 26), n);
    return (void)fuse_reply_buf(req, t_buf.data(), n);
  }
  if (!is_data(ino)) return (void)fuse_reply_err(req, EINVAL);
  int cur = ++g_inflight;
  int prev = g_max_inflight.load();
  while (cur > prev && !g_max_inflight.compare_exchange_weak(prev, cur)) {
  }
  g_reads++;
  int bucket = 0;
  while ((1ul << bucket) < size) bucket++;
  g_hist[bucket]++;
  if (off >= g_size) {
    g_inflight--;
    return (void)fuse_reply_buf(req, nullptr, 0);
  }
  size = std::min<size_t>(size, g_size - off);
  g_bytes += size;
  if (g_mode == Mode::Copy) {
    if (t_buf.size() < size) t_buf.resize(size);
    ssize_t n = pread(g_fd, t_buf.data(), size, off);
    g_inflight--;
    if (n < 0) return (void)fuse_reply_err(req, errno);
    fuse_reply_buf(req, t_buf.data(), n);
  } else {
    // Splice / FdCopy: hand libfuse an fd-backed buffer. With FUSE_CAP_SPLICE_WRITE wanted
    // libfuse splices file->pipe->/dev/fuse; otherwise it copies via an internal buffer.
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
    bv.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    bv.buf[0].fd = g_fd;
    bv.buf[0].pos = off;
    g_inflight--;
    // flags: FUSE_BUF_SPLICE_MOVE lets libfuse pass SPLICE_F_MOVE; 0 = splice without move.
    // (FUSE_BUF_NO_SPLICE would disable splice entirely, i.e. the libfuse copy fallback.)
    fuse_reply_data(req, &bv, g_opt.no_splice_move ? (enum fuse_buf_copy_flags)0 : FUSE_BUF_SPLICE_MOVE);
  }
}

struct DirBuf {
  std::vector<char> d;
};

void add_dirent(fuse_req_t req, std::vector<char>& buf, const char* name, fuse_ino_t ino, bool plus, off_t next) {
  size_t old = buf.size();
  if (plus) {
    struct fuse_entry_param e;
    std::memset(&e, 0, sizeof e);
    bool dot = !std::strcmp(name, ".") || !std::strcmp(name, "..");
    if (dot) {  // like passthrough_ll: no entry (ino 0) for "." and ".."
      e.attr.st_ino = ino;
      e.attr.st_mode = S_IFDIR;
    } else {
      e.ino = ino;
      e.attr_timeout = g_opt.attr_timeout;
      e.entry_timeout = g_opt.entry_timeout;
      fill_stat(ino, &e.attr);
    }
    size_t len = fuse_add_direntry_plus(req, nullptr, 0, name, &e, next);
    buf.resize(old + len);
    fuse_add_direntry_plus(req, buf.data() + old, len, name, &e, next);
  } else {
    struct stat st;
    std::memset(&st, 0, sizeof st);
    st.st_ino = ino;
    st.st_mode = (ino == kRoot || ino == kDir) ? S_IFDIR : S_IFREG;
    size_t len = fuse_add_direntry(req, nullptr, 0, name, &st, next);
    buf.resize(old + len);
    fuse_add_direntry(req, buf.data() + old, len, name, &st, next);
  }
}

// Directory listings are generated per call from offset (stateless).
void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  std::vector<std::pair<std::string, fuse_ino_t>> ents;
  std::vector<char> buf;
  buf.reserve(size);
  auto emit = [&](off_t idx, const std::string& name, fuse_ino_t child) -> bool {
    // returns false when buffer full
    size_t before = buf.size();
    add_dirent(req, buf, name.c_str(), child, plus, idx + 1);
    if (buf.size() > size) {
      buf.resize(before);
      return false;
    }
    return true;
  };
  if (ino == kRoot) {
    std::vector<std::pair<std::string, fuse_ino_t>> all = {
        {".", kRoot}, {"..", kRoot}, {"d", kDir}, {".stats", kStats}};
    for (int i = 0; i < g_opt.files; i++) all.push_back({"data" + std::to_string(i), kData0 + i});
    for (off_t i = off; i < (off_t)all.size(); i++)
      if (!emit(i, all[i].first, all[i].second)) break;
  } else if (ino == kDir) {
    off_t total = 2 + g_opt.dir_entries;
    for (off_t i = off; i < total; i++) {
      bool ok = i == 0   ? emit(i, ".", kDir)
                : i == 1 ? emit(i, "..", kRoot)
                         : emit(i, entry_name(i - 2), kEntry0 + (i - 2));
      if (!ok) break;
    }
  } else {
    return (void)fuse_reply_err(req, ENOTDIR);
  }
  fuse_reply_buf(req, buf.data(), buf.size());
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  g_readdirs++;
  do_readdir(req, ino, size, off, false);
}
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  g_readdirplus++;
  do_readdir(req, ino, size, off, true);
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if (ino != kRoot && ino != kDir) return (void)fuse_reply_err(req, ENOTDIR);
  fi->cache_readdir = 0;
  fuse_reply_open(req, fi);
}

// --tree=DIR: inode k (k >= 1) is the path g_paths[k - 1], found once by lookup and kept.
std::mutex g_tree_mu;
std::vector<std::string> g_paths;
std::unordered_map<std::string, fuse_ino_t> g_inos;

std::string tree_path(fuse_ino_t ino) {
  std::lock_guard<std::mutex> lock(g_tree_mu);
  return ino >= 1 && ino <= g_paths.size() ? g_paths[ino - 1] : std::string();
}

fuse_ino_t tree_ino(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_tree_mu);
  auto [it, added] = g_inos.emplace(path, g_paths.size() + 1);
  if (added) g_paths.push_back(path);
  return it->second;
}

bool tree_stat(fuse_ino_t ino, const std::string& path, struct stat* st) {
  if (path.empty() || stat(path.c_str(), st) != 0) return false;
  st->st_ino = ino;
  st->st_mode = (st->st_mode & S_IFMT) | (S_ISDIR(st->st_mode) ? 0555 : 0444);
  return true;
}

void tree_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  g_lookups++;
  const std::string dir = tree_path(parent);
  if (dir.empty()) return (void)fuse_reply_err(req, ENOENT);
  const std::string path = dir + "/" + name;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return (void)fuse_reply_err(req, errno);
  struct fuse_entry_param e;
  std::memset(&e, 0, sizeof e);
  e.ino = tree_ino(path);
  e.attr_timeout = g_opt.attr_timeout;
  e.entry_timeout = g_opt.entry_timeout;
  tree_stat(e.ino, path, &e.attr);
  fuse_reply_entry(req, &e);
}

void tree_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  g_getattrs++;
  struct stat st;
  if (!tree_stat(ino, tree_path(ino), &st)) return (void)fuse_reply_err(req, ENOENT);
  fuse_reply_attr(req, &st, g_opt.attr_timeout);
}

void tree_opendir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  fi->cache_readdir = 0;
  fuse_reply_open(req, fi);
}

// Plain readdir (no plus): the kernel looks each name up, as it does on a real mount's first walk.
void tree_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  g_readdirs++;
  const std::string path = tree_path(ino);
  DIR* d = path.empty() ? nullptr : opendir(path.c_str());
  if (!d) return (void)fuse_reply_err(req, ENOTDIR);
  std::vector<char> buf;
  off_t i = 0;
  while (dirent* e = readdir(d)) {
    if (i++ < off) continue;
    struct stat st;
    std::memset(&st, 0, sizeof st);
    st.st_ino = e->d_ino;  // any non-zero value: readdir(3) skips entries of inode 0
    st.st_mode = e->d_type == DT_DIR ? S_IFDIR : S_IFREG;
    const size_t old = buf.size(), len = fuse_add_direntry(req, nullptr, 0, e->d_name, &st, i);
    if (old + len > size) break;
    buf.resize(old + len);
    fuse_add_direntry(req, buf.data() + old, len, e->d_name, &st, i);
  }
  closedir(d);
  fuse_reply_buf(req, buf.data(), buf.size());
}

void tree_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  g_opens++;
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return (void)fuse_reply_err(req, EROFS);
  const std::string path = tree_path(ino);
  const int fd = path.empty() ? -1 : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return (void)fuse_reply_err(req, path.empty() ? ENOENT : errno);
  fi->fh = uint64_t(fd);
  fi->direct_io = g_opt.direct_io;
  fi->keep_cache = g_opt.keep_cache;
  fuse_reply_open(req, fi);
}

void tree_release(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  close(int(fi->fh));
  fuse_reply_err(req, 0);
}

void tree_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
  g_reads++;
  int bucket = 0;
  while ((1ul << bucket) < size) bucket++;
  g_hist[bucket]++;
  const int fd = int(fi->fh);
  if (g_mode == Mode::Copy) {
    if (t_buf.size() < size) t_buf.resize(size);
    const ssize_t n = pread(fd, t_buf.data(), size, off);
    if (n < 0) return (void)fuse_reply_err(req, errno);
    g_bytes += size_t(n);
    fuse_reply_buf(req, t_buf.data(), size_t(n));
  } else {
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
    bv.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    bv.buf[0].fd = fd;
    bv.buf[0].pos = off;
    g_bytes += size;
    fuse_reply_data(req, &bv, g_opt.no_splice_move ? (enum fuse_buf_copy_flags)0 : FUSE_BUF_SPLICE_MOVE);
  }
}

void op_destroy(void*) {
  std::fprintf(stderr, "benchfs destroy: %s", stats_text().c_str());
}

}  // namespace

int main(int argc, char* argv[]) {
  struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
  if (fuse_opt_parse(&args, &g_opt, kOptSpec, nullptr) == -1) return 1;
  if (!g_opt.backing == !g_opt.tree) {
    std::fprintf(stderr, "one of --backing=FILE or --tree=DIR required\n");
    return 1;
  }
  std::string m = g_opt.mode ? g_opt.mode : "splice";
  g_mode = m == "copy" ? Mode::Copy : m == "fdcopy" ? Mode::FdCopy : Mode::Splice;
  if (g_opt.tree) {
    char* real = realpath(g_opt.tree, nullptr);
    if (!real) {
      std::perror("tree");
      return 1;
    }
    tree_ino(real);  // the root, inode 1
    free(real);
  } else {
    g_fd = open(g_opt.backing, O_RDONLY | O_CLOEXEC);
    if (g_fd < 0) {
      std::perror("open backing");
      return 1;
    }
    struct stat st;
    fstat(g_fd, &st);
    g_size = st.st_size;
  }
  if (g_opt.max_read) {
    std::string o = "-omax_read=" + std::to_string(g_opt.max_read);
    fuse_opt_add_arg(&args, o.c_str());
  }

  struct fuse_cmdline_opts opts;
  if (fuse_parse_cmdline(&args, &opts) != 0) return 1;
  if (!opts.mountpoint) {
    std::fprintf(stderr, "usage: %s MOUNTPOINT --backing=FILE [options]\n", argv[0]);
    return 1;
  }
  struct fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.init = op_init;
  ops.destroy = op_destroy;
  if (g_opt.tree) {
    ops.lookup = tree_lookup;
    ops.getattr = tree_getattr;
    ops.open = tree_open;
    ops.release = tree_release;
    ops.read = tree_read;
    ops.opendir = tree_opendir;
    ops.readdir = tree_readdir;
  } else {
    ops.lookup = op_lookup;
    ops.getattr = op_getattr;
    ops.open = op_open;
    ops.read = op_read;
    ops.opendir = op_opendir;
    ops.readdir = op_readdir;
    if (!g_opt.no_readdirplus) ops.readdirplus = op_readdirplus;
  }

  struct fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
  if (!se) return 1;
  if (fuse_set_signal_handlers(se) != 0) return 1;
  if (fuse_session_mount(se, opts.mountpoint) != 0) return 1;
  fuse_daemonize(opts.foreground);
  int ret;
  if (opts.singlethread) {
    ret = fuse_session_loop(se);
  } else {
    struct fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(cfg, opts.clone_fd);
    // fuse_parse_cmdline leaves max_idle_threads = UINT_MAX when unset; passing that on makes
    // libfuse 3.14 print "Ignoring invalid max threads value 4294967295" (libfuse issue #1003).
    if (opts.max_idle_threads != UINT_MAX) fuse_loop_cfg_set_idle_threads(cfg, opts.max_idle_threads);
    if (opts.max_threads > 0 && opts.max_threads <= 100000) fuse_loop_cfg_set_max_threads(cfg, opts.max_threads);
    ret = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
  }
  std::fprintf(stderr, "benchfs loop returned %d (exited=%d)\n", ret, fuse_session_exited(se));
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  free(opts.mountpoint);
  fuse_opt_free_args(&args);
  if (g_fd >= 0) close(g_fd);
  return ret ? 1 : 0;
}
