// layouts_bench CKPT [TARGET]: what resolving a faked layout costs (issue 11: a DP-65536 target of
// a large checkpoint resolves in well under a second, and memory does not grow with W). Prints
// wall time and the process's RSS around each step; a figure, not a test.
#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "zeromount/view/view.h"

namespace {

using zm::view::Inode;
using zm::view::View;

long rss_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename F>
void step(const char* what, F&& f) {
  const long before = rss_kib();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double s = seconds_since(t0);
  printf("%-58s %9.3f ms   RSS %7.1f -> %7.1f MiB\n", what, s * 1e3, double(before) / 1024, double(rss_kib()) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: layouts_bench CHECKPOINT [TARGET, default zero3-dp65536-bf16]\n");
    return 2;
  }
  const std::string target = argc > 2 ? argv[2] : "zero3-dp65536-bf16";
  std::unique_ptr<View> v;
  step("View::load (index every tag)", [&] { v = View::load(argv[1]); });
  const Inode* layouts = v->lookup(zm::view::Tree::kRoot, "layouts");
  if (!layouts) return fprintf(stderr, "no layouts/ folder\n"), 1;
  const Inode* dir = nullptr;
  step(("lookup layouts/" + target + " (plan, O(params))").c_str(), [&] { dir = v->lookup(layouts->ino, target); });
  if (!dir) return fprintf(stderr, "%s: refused or not a layout name (see the log)\n", target.c_str()), 1;
  const Inode* tag = nullptr;
  for (auto e = v->dir_entry(*dir, 2); e; e = v->dir_entry(*dir, e->next))
    if (e->node->is_dir()) tag = e->node;
  if (!tag) return fprintf(stderr, "no tag folder\n"), 1;
  const size_t nodes = v->tree().size();
  for (const char* which : {"first", "last"}) {
    const bool last = std::string(which) == "last";
    const std::string name = [&] {
      // The model and optimizer files of rank 0 or W-1 (the names of spec §1.1).
      const size_t dp = std::stoul(target.substr(target.find("-dp") + 3));
      const std::string r = std::to_string(last ? dp - 1 : 0);
      const bool bf16 = target.find("bf16") != std::string::npos;
      return (bf16 ? "bf16_" : "") + std::string("zero_pp_rank_") + r + "_mp_rank_00_optim_states.pt";
    }();
    const Inode* f = nullptr;
    step(("lookup + stat + read 1 MiB of the " + std::string(which) + " rank's optimizer file").c_str(), [&] {
      f = v->lookup(tag->ino, name);
      if (!f) return;
      const auto open = v->open(*f, O_RDONLY);
      std::string buf(1 << 20, '\0');
      open.read(0, buf.data(), buf.size());
    });
    if (!f) fprintf(stderr, "%s: not found (not a ZeRO-3 bf16 target?)\n", name.c_str());
  }
  printf("tree nodes: %zu before the rank files, %zu after (listing is what makes all W names)\n", nodes,
         v->tree().size());
  return 0;
}
