// The live texts of .zeromount/ (errors, stats): what each reader may know of the folders' refused
// tags and entries, and the mount's counters.
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include "checkpoint_folder.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/memo.h"

namespace zm::view {

bool View::may_list(const Caller& who, uint64_t dir, const std::string& name) const {
  // A name never made (a made-up folder refused): whoever may list its folder may know why.
  const Inode* n = tree_.lookup(dir, name);
  if (!n) n = tree_.get(dir);
  if (!who.may(access(*n), n->is_dir() ? 0555 : 0444)) return false;
  if (n->ino == Tree::kRoot) return true;
  for (const Inode* p = tree_.get(n->parent);; p = tree_.get(p->parent)) {  // every folder on the way
    if (!who.may(access(*p), 0111)) return false;
    if (p->ino == Tree::kRoot) return true;
  }
}

// One entry, one line: names and reasons may hold newlines and bytes no terminal should get.
static std::string one_line(const std::string& line) {
  std::string out;
  for (size_t k = 0; k + 1 < line.size(); ++k) {
    const auto c = static_cast<unsigned char>(line[k]);
    if (c >= 0x20 && c != 0x7f) {
      out += char(c);
    } else {
      char buf[8];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "\n";
}

std::string View::errors_text(const Caller& who) const {
  std::vector<const Folder*> folders;
  {
    std::lock_guard<std::mutex> lock(growth_->mu);
    folders = growth_->order;
  }
  // Reasons name files by their path in the mount, never by where SRC is.
  const auto inside = [&](const std::string& reason) { return relative_to(root_, reason); };
  std::string text;
  for (const Folder* f : folders) {
    for (const auto& [entry, line] : f->error_lines(inside))  // seen by those who may read its entry
      if (may_list(who, f->node, entry)) text += one_line(line);
  }
  return text;
}

namespace {

// The daemon's resident memory now and at its highest (the kernel's VmRSS and VmHWM): a lookup's
// transient peak shows here even after the memory is given back.
uint64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  const size_t n = strlen(key);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') return std::stoull(line.substr(n + 1));
  return 0;
}
uint64_t rss_bytes() {
  return status_kib("VmRSS") << 10;
}
uint64_t peak_rss_bytes() {
  return status_kib("VmHWM") << 10;
}

}  // namespace

std::string View::stats_text(const Caller& who) const {
  const Growth& g = *growth_;
  size_t served = 0, refused = 0;
  std::vector<const Folder*> folders;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    folders = g.order;
  }
  for (const Folder* f : folders) {
    const auto [s, r] = f->tag_counts();
    served += s;
    refused += r;
  }
  // The tree and the built-file cache (a Memo::mu_) are read before Growth::mu (checkpoint_folder.h).
  const size_t inodes = tree_.size();
  const uint64_t files_evicted_in_use = built_.evicted_in_use();
  std::lock_guard<std::mutex> lock(g.mu);
  uint64_t requests = 0;
  for (const auto& [reader, c] : g.readers) requests += c->requests.load(std::memory_order_relaxed);
  std::string s = "tags_served " + std::to_string(served) + "\ntags_refused " + std::to_string(refused) +
                  "\ntags_after_mount " + std::to_string(g.tags_after_mount) + "\ntags_deleted " +
                  std::to_string(g.tags_deleted) + "\nbytes_from_shards " + std::to_string(files_.bytes_read()) +
                  "\nsource_timeouts " + std::to_string(files_.timeouts()) + "\nrequests " + std::to_string(requests) +
                  "\ninodes " + std::to_string(inodes) + "\nplans_kept " +
                  std::to_string(plan_weight().entries.load(std::memory_order_relaxed)) + "\nplan_bytes " +
                  std::to_string(plan_weight().bytes.load(std::memory_order_relaxed)) + "\nplans_evicted_in_use " +
                  std::to_string(plan_weight().evicted_in_use.load(std::memory_order_relaxed)) +
                  "\nfiles_evicted_in_use " + std::to_string(files_evicted_in_use) + "\nrss_bytes " +
                  std::to_string(rss_bytes()) + "\npeak_rss_bytes " + std::to_string(peak_rss_bytes()) + "\n";
  for (const auto& [reader, c] : g.readers)  // another user's processes are theirs to know
    if (const uint64_t bytes = c->bytes.load(std::memory_order_relaxed);
        bytes && (who.uid == 0 || reader.first == who.uid))
      s += "pid " + std::to_string(reader.second) + " bytes " + std::to_string(bytes) + "\n";
  return s;
}

}  // namespace zm::view
