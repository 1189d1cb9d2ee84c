// Micro-benchmarks of the core (no FUSE): pickle parse throughput, index build time, and
// VirtualFile reads against plain pread of the same bytes. Prints figures and ratios; asserts nothing.
#include <fcntl.h>

#include <sys/resource.h>
#include <unistd.h>
#include <map>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/view/view.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

std::string tag_dir(const std::string& ckpt) {
  auto dir = zm::ds::scan_checkpoint(ckpt);
  return dir.root_is_tag ? dir.root : dir.root + "/" + dir.latest.value_or(dir.tags.at(0));
}

int parse(const std::string& ckpt) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(tag_dir(ckpt)))
    if (e.path().extension() == ".pt") files.push_back(e.path());
  uint64_t bytes = 0;
  const auto t0 = Clock::now();
  for (const auto& f : files) bytes += zm::pt::load_pt(f)->pickle_size;
  const double s = secs(t0);
  printf("parse: %zu files, %.1f MiB of pickles in %.3f s: %.1f MiB/s, %.0f files/s\n", files.size(), bytes / 1048576.0,
         s, bytes / 1048576.0 / s, files.size() / s);
  return 0;
}

int index(const std::string& ckpt, int runs) {
  std::vector<double> t;
  size_t params = 0;
  int dp = 0;
  for (int k = 0; k < runs; ++k) {
    const auto t0 = Clock::now();
    auto ix = zm::ds::index_tag(tag_dir(ckpt));
    t.push_back(secs(t0));
    params = ix->params.size();
    dp = ix->dp;
  }
  std::sort(t.begin(), t.end());
  printf("index: %zu params x %d ranks: median %.3f s (min %.3f, max %.3f) over %d runs\n", params, dp, t[t.size() / 2],
         t.front(), t.back(), runs);
  return 0;
}

// Reads every universal state file of the view through VirtualFile::read, then the same source
// extents with plain pread, both from the page cache, in the same buffer size.
int vfile(const std::string& ckpt) {
  auto v = zm::view::View::load(ckpt);
  std::vector<zm::view::OpenFile> files;
  for (uint64_t i = 1; i <= v->tree().size(); ++i) {
    const auto& n = *v->tree().get(i);
    if (!n.is_dir() && n.name.size() > 3 && n.name.substr(n.name.size() - 3) == ".pt" && n.name != "step.pt" &&
        v->describe(n).find("_universal/zero/") != std::string::npos)
      files.push_back(v->open(n, O_RDONLY));
  }
  std::string buf(1 << 20, '\0');
  auto pass_vf = [&] {
    uint64_t bytes = 0;
    for (const auto& f : files)
      for (uint64_t off = 0; off < f.size(); off += buf.size()) bytes += f.read(off, buf.data(), buf.size());
    return bytes;
  };
  std::map<uint32_t, zm::pt::File> opened;
  auto pass_pread = [&] {
    uint64_t bytes = 0;
    for (const auto& f : files)
      for (const auto& s : f.content().segments()) {
        if (s.kind != zm::pt::Segment::Stored) continue;
        const zm::pt::File& file = opened.try_emplace(s.file, v->files().path(s.file)).first->second;
        const int fd = file.fd();
        for (uint64_t at = 0; at < s.length; at += buf.size()) {
          const size_t n = size_t(std::min<uint64_t>(buf.size(), s.length - at));
          bytes += uint64_t(::pread(fd, buf.data(), n, off_t(s.offset + at)));
        }
      }
    return bytes;
  };
  pass_pread();  // warm the page cache
  auto t0 = Clock::now();
  const uint64_t b1 = pass_pread();
  const double s1 = secs(t0);
  t0 = Clock::now();
  const uint64_t b2 = pass_vf();
  const double s2 = secs(t0);
  printf(
      "vfile: %zu files; pread of the tensor bytes %.0f MB/s; VirtualFile::read of the whole files %.0f MB/s; ratio "
      "%.2f\n",
      files.size(), b1 / 1e6 / s1, b2 / 1e6 / s2, (b2 / s2) / (b1 / s1));
  return 0;
}

// Builds the tag's report page through the view (one streaming pass over every fp32 weight and
// Adam moment) and prints the pass's rate in shard bytes per second of wall and of process CPU.
// Run it twice on a checkpoint that fits in memory: the second run reads from the page cache.
int report(const std::string& ckpt) {
  auto v = zm::view::View::load(ckpt);
  const zm::view::Inode* page = nullptr;
  for (uint64_t i = 1; i <= v->tree().size() && !page; ++i) {
    const auto& n = *v->tree().get(i);
    if (n.name == "report.html" && v->describe(n).find("_params/") != std::string::npos) page = &n;
  }
  if (!page) {
    fprintf(stderr, "zm_bench report: %s: no <tag>_params/report.html\n", ckpt.c_str());
    return 1;
  }
  rusage r0{}, r1{};
  getrusage(RUSAGE_SELF, &r0);
  const auto t0 = Clock::now();
  const auto f = v->open(*page, O_RDONLY);
  std::string buf(1 << 20, '\0');
  for (uint64_t off = 0; off < f.size(); off += buf.size()) f.read(off, buf.data(), buf.size());
  const double wall = secs(t0);
  getrusage(RUSAGE_SELF, &r1);
  auto cpu = [](const rusage& r) {
    return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + double(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  const std::string text(buf.data(), std::min<size_t>(buf.size(), f.size()));
  const size_t at = text.find("</span> bytes ");
  const size_t from = text.rfind('>', at) + 1;
  const double bytes = at == std::string::npos ? 0 : std::stod(text.substr(from, at - from));
  printf("report: %.0f shard bytes in %.3f s wall, %.3f s CPU: %.2f GB/s wall, %.2f GB/s per CPU second\n", bytes, wall,
         cpu(r1) - cpu(r0), bytes / 1e9 / wall, bytes / 1e9 / (cpu(r1) - cpu(r0)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: zm_bench parse|index|vfile|report CHECKPOINT [runs]\n");
    return 2;
  }
  const std::string what = argv[1], ckpt = argv[2];
  if (what == "parse") return parse(ckpt);
  if (what == "index") return index(ckpt, argc > 3 ? std::stoi(argv[3]) : 5);
  if (what == "vfile") return vfile(ckpt);
  if (what == "report") return report(ckpt);
  return 2;
}
