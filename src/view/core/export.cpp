#include "zeromount/view/export.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <tuple>

#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_writer.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/worker_pool.h"

namespace zm::view {

namespace fs = std::filesystem;

namespace {

// Made-up top-level entries are marked with the kind of the Provider that made them.
bool wanted(const Inode& top, const std::string& what) {
  return top.made_by && (what == "all" || what == top.made_by->kind());
}

void check_kind(const std::string& what) {
  std::string kinds;
  for (const auto& p : providers()) {
    if (what == p->kind()) return;
    kinds += std::string(p->kind()) + ", ";
  }
  if (what != "all") throw Error("export: unknown view '" + what + "' (" + kinds + "or all)", EINVAL);
}

struct Job {
  const Inode* node;
  std::string path;
  std::string link_to;  // the same bytes were already exported there: hard-link instead of copying
  bool whole_real_file = false;
};

void collect(const View& v, const Inode& n, const std::string& path, std::vector<Job>& files,
             std::vector<std::string>& dirs) {
  if (n.link()) return;  // made-up folders hold no links
  if (!n.is_dir()) {
    files.push_back({&n, path});
    return;
  }
  dirs.push_back(path);
  for (auto e = v.dir_entry(n, 2); e; e = v.dir_entry(n, e->next))
    collect(v, *e->node, path + "/" + e->node->name, files, dirs);
}

void copy_file(const View& v, const Job& job, std::string& buf, std::atomic<uint64_t>& done, const ExportOptions& o,
               uint64_t total) {
  const int fd = ::open(job.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(job.path + ": " + strerror(errno), errno);
  try {
    const OpenFile file = v.open(*job.node, O_RDONLY);
    for (uint64_t off = 0; off < file.size();) {
      const size_t n = file.read(off, buf.data(), buf.size());
      for (size_t w = 0; w < n;) {
        const ssize_t r = ::pwrite(fd, buf.data() + w, n - w, off_t(off + w));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw Error(job.path + ": write failed: " + strerror(errno), errno ? errno : EIO);
        w += size_t(r);
      }
      off += n;
      if (o.cancel && o.cancel->load()) throw Error("export interrupted", EINTR);
      const uint64_t d = done.fetch_add(n) + n;
      if (o.progress) o.progress(d, total);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw Error(job.path + ": close failed: " + strerror(errno), errno);
  if (o.crcs && !job.whole_real_file && job.path.size() > 3 && job.path.compare(job.path.size() - 3, 3, ".pt") == 0)
    pt::write_record_crcs(job.path);  // a real file already has the CRCs torch wrote
}

// `.<out>.zeromount-XXXXXX` folders beside `target` whose export process is gone.
void remove_dead_exports(const fs::path& target) {
  const std::string prefix = "." + target.filename().string() + ".zeromount-";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0 || !e.is_directory(ec)) continue;
    std::ifstream in(e.path() / ".zeromount-pid");
    pid_t pid = 0;
    if (in >> pid && pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM)) continue;  // still running
    fs::remove_all(e.path(), ec);
  }
}

// The made-up entries of kind `what` in every checkpoint folder at or below `dir` (real folders
// are walked: a Trainer's output_dir holds one checkpoint folder per checkpoint-N/).
void made_entries(const View& v, const Inode& dir, const std::string& rel, const std::string& what,
                  std::vector<std::pair<const Inode*, std::string>>& out) {
  for (auto e = v.dir_entry(dir, 2); e; e = v.dir_entry(dir, e->next)) {
    const Inode& n = *e->node;
    const std::string path = rel.empty() ? n.name : rel + "/" + n.name;
    if (wanted(n, what))
      out.emplace_back(&n, path);
    else if (n.is_dir() && !n.made_by && !n.folder().real.empty() && !n.folder().plain)
      made_entries(v, n, path, what, out);
  }
}

}  // namespace

ExportResult export_view(const View& v, const std::string& out, const ExportOptions& o) {
  const fs::path target = fs::absolute(out).lexically_normal();
  check_kind(o.what);
  if (fs::exists(target)) throw Error(out + ": already exists; export writes a new folder", EEXIST);
  const Inode& root = *v.tree().get(Tree::kRoot);
  remove_dead_exports(target);
  std::string tmpl = (target.parent_path() / ("." + target.filename().string() + ".zeromount-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw Error(out + ": cannot create a folder beside it: " + strerror(errno), errno);
  const std::string tmp = tmpl;
  try {
    std::ofstream(tmp + "/.zeromount-pid") << getpid() << "\n";
    std::vector<Job> files;
    std::vector<std::string> dirs;
    std::vector<std::pair<const Inode*, std::string>> made;  // wanted made-up entries, by path below SRC
    made_entries(v, root, "", o.what, made);
    if (!o.below.empty() && made.size() > 1)
      throw Error("export: " + std::to_string(made.size()) + " checkpoint folders have a " + made[0].first->name +
                      "/ folder (" + made[0].second + ", " + made[1].second + ", ...): export one of them",
                  EINVAL);
    for (const auto& [top, rel] : made) {
      if (o.below.empty()) {
        collect(v, *top, tmp + "/" + rel, files, dirs);
      } else if (const Inode* n = v.lookup(top->ino, o.below)) {
        collect(v, *n, tmp, files, dirs);
      } else {
        throw Error("export: " + rel + "/" + o.below + " does not exist (see " + rel + "/README)", ENOENT);
      }
    }
    if (files.empty())
      throw Error("export: the view has no '" + o.what + "' folders (is this a ZeRO checkpoint?)", ENOENT);
    for (const auto& d : dirs) fs::create_directories(d);
    // The model-state names of a universal folder are one source file under W + 1 names: write
    // it once and hard-link the rest, as a copy of the folder would not.
    std::map<std::tuple<uint32_t, uint64_t, uint64_t>, std::string> whole_files;
    for (auto& f : files) {
      const OpenFile file = v.open(*f.node, O_RDONLY);
      const auto& segs = file.content().segments();
      if (segs.size() != 1 || segs[0].kind != pt::Segment::Stored || segs[0].offset != 0) continue;
      f.whole_real_file = true;
      auto [it, fresh] = whole_files.try_emplace({segs[0].file, segs[0].offset, segs[0].length}, f.path);
      if (!fresh) f.link_to = it->second;
    }
    std::stable_partition(files.begin(), files.end(), [](const Job& j) { return j.link_to.empty(); });
    uint64_t total = 0;
    for (const auto& f : files)
      if (f.link_to.empty()) total += uint64_t(v.attr(*f.node).st_size);
    std::atomic<uint64_t> done{0};
    std::mutex buf_mu;
    std::vector<std::string> bufs;  // o.chunk bytes each, one per worker at a time
    parallel_for(files.size(), std::max(1u, o.threads), [&](size_t k) {
      if (!files[k].link_to.empty()) return;
      std::string buf;
      {
        std::lock_guard<std::mutex> lock(buf_mu);
        if (!bufs.empty()) buf = std::move(bufs.back()), bufs.pop_back();
      }
      buf.resize(o.chunk);
      copy_file(v, files[k], buf, done, o, total);
      std::lock_guard<std::mutex> lock(buf_mu);
      bufs.push_back(std::move(buf));
    });
    for (const auto& f : files)
      if (!f.link_to.empty() && ::link(f.link_to.c_str(), f.path.c_str()) != 0)
        throw Error(f.path + ": cannot link: " + strerror(errno), errno);
    if (o.cancel && o.cancel->load()) throw Error("export interrupted", EINTR);
    fs::remove(tmp + "/.zeromount-pid");
    const mode_t mask = ::umask(0);  // mkdtemp made it 0700; the result follows the umask like any mkdir
    ::umask(mask);
    ::chmod(tmp.c_str(), 0777 & ~mask);
    fs::rename(tmp, target);
    return {files.size(), total};
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace zm::view
