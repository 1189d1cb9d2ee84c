// layout_list_bench CKPT [TARGET] [N] [SKIP]: what listing layouts/<TARGET>/<tag> costs the daemon
// (issue 14). A FUSE readdirplus asks for every entry's attributes, and View::attr of a lazy rank
// file builds its whole VirtualFile (the pickle) to know its size; this does the same without
// FUSE, for N entries (default all) after the first SKIP, and prints the time per model / optimizer file.
#include <chrono>
#include <cstdio>
#include <string>

#include "zeromount/view/view.h"

int main(int argc, char** argv) {
  if (argc < 2) return fprintf(stderr, "usage: layout_list_bench CHECKPOINT [TARGET] [N] [SKIP]\n"), 2;
  using clk = std::chrono::steady_clock;
  const std::string target = argc > 2 ? argv[2] : "zero3-dp4096-bf16";
  const size_t limit = argc > 3 ? std::stoul(argv[3]) : size_t(-1);
  size_t skip = argc > 4 ? std::stoul(argv[4]) : 0;
  auto v = zm::view::View::load(argv[1]);
  const auto* layouts = v->lookup(zm::view::Tree::kRoot, "layouts");
  const auto* dir = layouts ? v->lookup(layouts->ino, target) : nullptr;
  if (!dir) return fprintf(stderr, "%s: no such layout\n", target.c_str()), 1;
  const zm::view::Inode* tag = nullptr;
  for (auto e = v->dir_entry(*dir, 2); e; e = v->dir_entry(*dir, e->next))
    if (e->node->is_dir()) tag = e->node;
  if (!tag) return fprintf(stderr, "no tag folder\n"), 1;
  double t_model = 0, t_optim = 0;
  size_t n_model = 0, n_optim = 0;
  uint64_t bytes = 0;
  const auto t0 = clk::now();
  for (auto e = v->dir_entry(*tag, 2); e && n_model + n_optim < limit; e = v->dir_entry(*tag, e->next)) {
    if (skip) {
      --skip;
      continue;
    }
    const auto t = clk::now();
    const struct stat st = v->attr(*e->node);
    const double s = std::chrono::duration<double>(clk::now() - t).count();
    bytes += uint64_t(st.st_size);
    if (e->node->name.find("model_states") != std::string::npos)
      t_model += s, ++n_model;
    else
      t_optim += s, ++n_optim;
  }
  const double all = std::chrono::duration<double>(clk::now() - t0).count();
  printf(
      "%s: %zu entries in %.3f s (%.1f GiB stat-reported); model files %zu x %.3f ms, optimizer files %zu x %.3f ms\n",
      target.c_str(), n_model + n_optim, all, double(bytes) / (1 << 30), n_model,
      n_model ? t_model / double(n_model) * 1e3 : 0.0, n_optim, n_optim ? t_optim / double(n_optim) * 1e3 : 0.0);
  return 0;
}
