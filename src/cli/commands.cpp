#include "commands.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "daemon.h"
#include "mount_point.h"
#include "zeromount/check/diff.h"
#include "zeromount/check/verify.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/ds/inspect.h"
#include "zeromount/ds/source_fs.h"
#include "zeromount/ds/source_path.h"
#include "zeromount/fuse/adapter.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"
#include "zeromount/view/export.h"
#include "zeromount/view/files/torch_layouts.h"
#include "zeromount/view/provider.h"

namespace zm::cli {

namespace fs = std::filesystem;

namespace {

std::string tags_here(const ds::CheckpointDir& dir) {
  std::string s = dir.root_is_tag ? fs::path(dir.root).filename().string() : "";
  for (const auto& t : dir.tags) s += (s.empty() ? "" : ", ") + t;
  return s.empty() ? "none" : s;
}

// The tag folder inspect reads: --tag, else the one `latest` names, else the last in training order.
std::string chosen_tag_dir(const ds::CheckpointDir& dir, const std::string& ckpt, const std::string& tag) {
  const std::string root_name = fs::path(dir.root).filename().string();
  if (dir.root_is_tag && (tag.empty() || tag == root_name)) return dir.root;
  if (!tag.empty() && std::find(dir.tags.begin(), dir.tags.end(), tag) == dir.tags.end())
    throw Error(
        ckpt + ": --tag " + tag + ": no such tag folder (with *_optim_states.pt files); tags here: " + tags_here(dir),
        ENOENT);
  if (!tag.empty()) return (fs::path(dir.root) / tag).string();
  if (dir.latest && std::find(dir.tags.begin(), dir.tags.end(), *dir.latest) != dir.tags.end())
    return (fs::path(dir.root) / *dir.latest).string();
  if (dir.latest)
    throw Error(
        ckpt + "/latest: names '" + *dir.latest +
            "', which is not a tag folder with *_optim_states.pt files; pass --tag (tags here: " + tags_here(dir) + ")",
        ENOENT);
  if (dir.tags.empty()) throw Error(ckpt + ": no tag folder with *_optim_states.pt files and no 'latest'", ENOENT);
  return (fs::path(dir.root) / dir.tags.back()).string();
}

}  // namespace

namespace {

// A run folder (a Trainer's output_dir): no tags of its own, checkpoint folders one level below,
// each as (name, its tags), in name order; empty for anything else.
std::vector<std::pair<std::string, ds::CheckpointDir>> run_checkpoints(const ds::CheckpointDir& dir) {
  std::vector<std::pair<std::string, ds::CheckpointDir>> out;
  if (dir.root_is_tag || !dir.tags.empty() || dir.latest) return out;
  std::error_code ec;
  for (fs::directory_iterator it(dir.root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code bad;
    if (it->is_symlink(bad) || !it->is_directory(bad) || !ds::holds_tag_folder(it->path().string())) continue;
    out.emplace_back(it->path().filename().string(), ds::scan_checkpoint(it->path().string()));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

// inspect of a run folder without --tag: its checkpoint folders and their tags, and how to name one.
int inspect_run(const std::string& ckpt, const std::vector<std::pair<std::string, ds::CheckpointDir>>& runs,
                bool json) {
  std::string o = json ? "{\"run_folder\":true,\"checkpoints\":[" : "";
  if (!json)
    o = ckpt + ": a run folder (a Trainer's output_dir) with " + std::to_string(runs.size()) +
        " checkpoint folder(s); pass --tag FOLDER/TAG for one of them\n";
  for (size_t k = 0; k < runs.size(); ++k) {
    const auto& [name, d] = runs[k];
    if (json) {
      o += std::string(k ? "," : "") + "{\"folder\":" + pt::json_escape(name) +
           ",\"latest\":" + (d.latest ? pt::json_escape(*d.latest) : std::string("null")) + ",\"tags\":[";
      for (size_t t = 0; t < d.tags.size(); ++t) o += (t ? "," : "") + pt::json_escape(d.tags[t]);
      o += "]}";
    } else {
      o += "  " + name + "  " + (d.tags.empty() ? std::string("(no tag folder)") : tags_here(d)) +
           (d.latest ? "  latest: " + pt::quoted(*d.latest) : std::string()) + "\n";
    }
  }
  std::cout << o << (json ? "]}\n" : "");
  return 0;
}

}  // namespace

// inspect --layout fsdp-dp<W> | torch: what layouts/<name> holds, file by file, as the mount and
// export show it (its plans are the view's, so the view is loaded).
int inspect_torch_layout(const std::string& ckpt, bool json, const std::string& name) {
  view::ViewOptions vo;
  vo.rescan_seconds = 0;
  const auto v = view::View::load(ckpt, vo);
  const view::Inode* layouts = v->lookup(view::Tree::kRoot, vo.layouts_dir);
  const view::Inode* top = layouts ? v->lookup(layouts->ino, name) : nullptr;
  if (!top) {
    std::string why = v->errors_text();
    throw Error(ckpt + ": no " + vo.layouts_dir + "/" + name + " here" + (why.empty() ? "" : ":\n" + why), ENOENT);
  }
  std::vector<std::pair<std::string, uint64_t>> files;
  const auto walk = [&](auto&& self, const view::Inode& dir, const std::string& rel) -> void {
    for (auto e = v->dir_entry(dir, 2); e; e = v->dir_entry(dir, e->next)) {
      const std::string path = rel.empty() ? e->node->name : rel + "/" + e->node->name;
      if (e->node->is_dir())
        self(self, *e->node, path);
      else if (e->node->is_file())
        files.emplace_back(path, uint64_t(v->attr(*e->node).st_size));
    }
  };
  walk(walk, *top, "");
  uint64_t total = 0;
  for (const auto& f : files) total += f.second;
  std::string o;
  if (json) {
    o = "{\"layout\": " + pt::json_escape(name) + ", \"bytes\": " + std::to_string(total) + ", \"files\": [";
    for (size_t k = 0; k < files.size(); ++k)
      o += std::string(k ? ", " : "") + "{\"path\": " + pt::json_escape(files[k].first) +
           ", \"size\": " + std::to_string(files[k].second) + "}";
    o += "]}\n";
  } else {
    o = vo.layouts_dir + "/" + name + ": " + std::to_string(files.size()) + " files, " + pt::human_bytes(total) + "\n";
    for (const auto& [path, size] : files)
      o += "  " + pt::pad(path, 40) + " " + pt::lpad(pt::with_commas(size), 16) + "\n";
  }
  std::cout << o;
  return 0;
}

int inspect(const std::string& ckpt, const std::string& tag, bool json, const std::string& layout) {
  if (!layout.empty() && view::parse_torch_layout(layout)) return inspect_torch_layout(ckpt, json, layout);
  const auto target = layout.empty() ? std::nullopt : std::optional(layout_named("--layout", layout));
  const ds::CheckpointDir dir = ds::scan_checkpoint(ckpt);
  // A run folder's tag is named by its path below it, as --html names it: checkpoint-4/global_step4.
  if (const auto runs = run_checkpoints(dir); !runs.empty()) {
    const auto slash = tag.find('/');
    if (tag.empty()) return inspect_run(ckpt, runs, json);
    if (slash != std::string::npos)
      return inspect((fs::path(dir.root) / tag.substr(0, slash)).string(), tag.substr(slash + 1), json, layout);
  }
  const auto index = ds::index_tag(chosen_tag_dir(dir, ckpt, tag));
  if (target)
    std::cout << (json ? layout_json(*index, *target) : layout_table(*index, *target));
  else
    std::cout << (json ? ds::inspect_json(*index) : ds::inspect_text(*index));
  return 0;
}

int inspect_html(const std::string& ckpt, const std::string& tag, const std::string& out) {
  view::ViewOptions vo;
  vo.rescan_seconds = 0;  // the tags there are now
  const auto v = view::View::load(ckpt, vo);
  const std::string page = tag.empty() ? "report.html" : tag + "_params/report.html";
  const view::Inode* n = v->inode(view::Tree::kRoot).is_dir() ? &v->inode(view::Tree::kRoot) : nullptr;
  for (size_t at = 0; n && at <= page.size();) {
    const size_t end = std::min(page.find('/', at), page.size());
    n = v->lookup(n->ino, page.substr(at, end - at));
    at = end + 1;
  }
  if (!n || n->is_dir())
    throw Error(ckpt + ": no " + page +
                    (tag.empty() ? " (it holds no tag folder, and no checkpoint folder one level below)"
                                 : " (no such tag; a tag in a folder below is named by its path, e.g. "
                                   "checkpoint-2/global_step2)"),
                ENOENT);
  const view::OpenFile file = v->open(*n, O_RDONLY);
  std::string html(file.size(), '\0');
  for (uint64_t at = 0; at < html.size();) at += file.read(at, html.data() + at, html.size() - at);
  const std::string tmp = out + ".zeromount-tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(html.data(), std::streamsize(html.size()));
    if (!f.flush()) throw Error(tmp + ": cannot write", EIO);
  }
  if (::rename(tmp.c_str(), out.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(out + ": " + strerror(e), e);
  }
  std::cout << "wrote " << out << " (" << pt::human_bytes(html.size()) << "), the page " << page << " of a mount\n";
  return 0;
}

namespace {
std::atomic<bool> g_cancel_export{false};
void cancel_export(int) {
  g_cancel_export = true;
}
}  // namespace

int export_view(const std::string& source, const std::string& out, const std::string& what, unsigned threads,
                const std::string& layout) {
  if (!layout.empty()) check_layout_name("--layout", layout);  // before the load, which takes a while
  if (layout.empty() && what != "all") {
    std::string kinds;
    bool known = false;
    for (const auto& p : view::providers()) {
      kinds += std::string(p->kind()) + ", ";
      known |= what == p->kind();
    }
    if (!known) throw UsageError("export --view: unknown view '" + what + "' (" + kinds + "or all)");
  }
  {  // the source is never written: not even a new folder inside it
    std::error_code ec;
    const fs::path src = fs::weakly_canonical(source, ec), dst = fs::weakly_canonical(out, ec);
    const auto [s_end, d_at] = std::mismatch(src.begin(), src.end(), dst.begin(), dst.end());
    if (!src.empty() && s_end == src.end())
      throw UsageError("export: " + out + " lies inside the checkpoint folder " + source +
                       ", which zeromount never writes: export somewhere else");
  }
  view::ViewOptions vo;
  vo.rescan_seconds = 0;  // an export copies the tags that were there when it started
  auto view = view::View::load(source, vo);
  view::ExportOptions o;
  // Ctrl-C, SIGTERM or SIGHUP (the ssh session that ran it closed) stop the export, which then
  // removes its temporary folder.
  struct sigaction sa {};
  sa.sa_handler = cancel_export;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  o.cancel = &g_cancel_export;
  o.what = layout.empty() ? what : "layouts";
  o.below = layout;
  o.threads = threads;
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<int64_t> last_ms{-1000};
  const bool tty = isatty(2);
  if (tty)
    o.progress = [&](uint64_t done, uint64_t total) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const auto ms = int64_t(s * 1000);
      int64_t prev = last_ms.load();
      if ((ms - prev < 200 && done < total) || !last_ms.compare_exchange_strong(prev, ms)) return;
      const double rate = s > 0 ? double(done) / s : 0;
      const double eta = rate > 0 ? double(total - done) / rate : 0;
      fprintf(stderr, "\r%5.1f%%  %s of %s  %s/s  ETA %.0f s   ", total ? 100.0 * double(done) / double(total) : 100.0,
              pt::human_bytes(done).c_str(), pt::human_bytes(total).c_str(), pt::human_bytes(uint64_t(rate)).c_str(),
              eta);
    };
  const auto r = view::export_view(*view, out, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) fprintf(stderr, "\n");
  std::cout << "exported " << r.files << " files, " << pt::human_bytes(r.bytes) << " to " << out << " in "
            << pt::format_double(double(int64_t(s * 1000)) / 1000) << " s\n";
  return 0;
}

int dump(const std::string& file, bool json) {
  auto pt = pt::load_pt(file);
  std::cout << (json ? pt::dump_json(*pt) + "\n" : pt::dump_tree(*pt));
  return 0;
}

namespace {

void raise_fd_limit() {
  // Up to FileTable::kMaxOpen shards are open at once, besides the FUSE device and the logs.
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// -o layouts_dir=NAME must name a folder of its own: a name SRC or another made-up folder already
// has would leave the layouts nowhere. (The default name gives way to a real SRC/layouts.)
void check_layouts_dir(const view::View& view, const std::string& name) {
  if (name == view::ViewOptions{}.layouts_dir) return;
  const view::Inode* had = view.tree().lookup(view::Tree::kRoot, name);
  if (!had || (had->made_by && had->made_by->kind() == "layouts")) return;
  throw UsageError("-o layouts_dir: '" + name + "' is already a name in the view (" +
                   (had->made_by ? "a made-up " + std::string(had->made_by->kind()) + " folder" : "an entry of SRC") +
                   "); choose another name");
}

}  // namespace

int mount(const MountOptions& o) {
  spdlog::set_level(spdlog::level::from_str(o.log_level));  // main() accepts only known levels
  raise_fd_limit();
  // Checked before anything is indexed or forked, so that a mistake leaves nothing behind.
  const std::string mountpoint = resolve_mount_point(o.mountpoint);
  if (const std::string why = mount_point_problem(mountpoint); !why.empty()) throw Error(why, EEXIST);
  std::error_code ec;
  const std::string source = fs::canonical(o.source, ec).string();
  if (const std::string why = ec ? "" : overlap_problem(source, mountpoint); !why.empty()) throw UsageError(why);
  // Index before forking: a checkpoint that cannot be served is refused here, in the caller's terminal.
  view::ViewOptions vo;
  vo.bare_zero3_tensors = o.bare_zero3_tensors;
  vo.layout_presets = o.layout_presets;
  vo.layouts_dir = o.layouts_dir;
  vo.tp_strict = !o.tp_no_strict;
  vo.tags = o.tags;
  vo.rescan_seconds = o.rescan_seconds;
  // On a network filesystem or an object-storage client, a rescan lists SRC through the network (a
  // paid LIST per folder and node on S3): look for new tags once a minute unless told otherwise,
  // and read SRC's `latest` again at most as often (each read of it is a GET).
  if (const std::string kind = ds::network_filesystem(o.source); !kind.empty()) {
    if (!o.rescan_given) vo.rescan_seconds = kNetworkRescanSeconds;
    vo.network_source = true;
    vo.source_timeout_seconds = o.source_timeout_seconds >= 0 ? o.source_timeout_seconds : kNetworkSourceTimeout;
    spdlog::info(
        "{}: on {} (a network filesystem or object-storage client): new tags and a rewritten latest are "
        "looked for at most every {:g} s (-o rescan=S sets it), off the request path; a read it does not "
        "answer in {:g} s fails with EIO (-o source_timeout=S)",
        o.source, kind, vo.rescan_seconds, vo.source_timeout_seconds);
  } else if (o.source_timeout_seconds > 0) {
    vo.source_timeout_seconds = o.source_timeout_seconds;  // asked for: a local NFS not recognised, say
  }
  vo.crc = o.crc;
  vo.report = o.report;
  vo.max_shard_bytes = o.max_shard_bytes;
  vo.weights_saved_names = o.weights_saved_names;
  vo.cache_bytes = size_t(o.cache_bytes);
  // A bad -o option is a usage error now, before the checkpoint is indexed (which may take long).
  if (const std::string why = fuse::option_problem(o.fuse_opts); !why.empty()) throw UsageError(why);
  vo.mount_point = mountpoint;
  ds::fence_mount(mountpoint);  // no link SRC holds is ever followed into the mount itself
  auto view = view::View::load(o.source, vo);
  check_layouts_dir(*view, o.layouts_dir);
  if (view->stats().tags == 0 && view->stats().refused_tags == 0 && view->stats().folders == 0)
    spdlog::warn(
        "{}: no ZeRO checkpoint here (no tag folder with *_optim_states.pt files): mounting a plain "
        "read-only mirror",
        o.source);
  if (const size_t n = hidden_entries(mountpoint))
    spdlog::warn("{}: not empty: the mount hides its {} entr{} until it is unmounted", mountpoint, n,
                 n == 1 ? "y" : "ies");
  malloc_trim(0);  // give back what decoding the pickles used, before the server inherits it
  // One malloc arena for the server's worker threads: each thread's own arena keeps its high-water
  // mark, and a plan made for any name anyone looks up lands in whichever thread's arena is
  // asking. With one, what the tree forgets is reused (bench/names.py: +6 MiB for 500 distinct
  // targets against +53 MiB with one arena per thread); reads allocate nothing per request.
  mallopt(M_ARENA_MAX, 1);
  const auto& s = view->stats();
  fuse::MountConfig cfg;
  cfg.mountpoint = mountpoint;
  cfg.fsname = "zeromount:" + source;
  for (char& c : cfg.fsname)
    if (c == ',') c = '_';  // a comma would end the -o value
  cfg.options = o.fuse_opts;
  cfg.threads = o.threads;
  // On a network source a read may wait for its deadline (-o source_timeout) while the backend is
  // gone; libfuse's 10 workers could all be such reads, and `ls` of the mount would wait behind
  // them. Idle workers cost a stack each.
  if (!cfg.threads && vo.network_source) cfg.threads = kNetworkFuseThreads;
  cfg.debug = o.debug;
  // A run folder (a Trainer's output_dir) has no tags of its own: its checkpoint folders are filled
  // when first listed, so counts of tags would say nothing yet.
  const std::string summary =
      (s.tags == 0 && s.refused_tags == 0 && s.folders > 0
           ? fmt::format("mounted {} on {}: a folder of {} checkpoint or run folder(s), each filled when first used",
                         o.source, mountpoint, s.folders)
           : fmt::format("mounted {} on {}: {} tag(s), {} params, {} files, {} shards, {} of optimizer state; indexed "
                         "in {:.3f} s ({} from cache)",
                         o.source, mountpoint, s.tags, s.params, s.files, s.shards, pt::human_bytes(s.state_bytes),
                         s.index_seconds, s.cache_hits)) +
      (s.refused_tags ? fmt::format("; {} tag(s) not served, see {}/.zeromount/errors", s.refused_tags, mountpoint)
                      : "");

  // One line at unmount with the daemon's counters (.zeromount/stats without the per-reader lines).
  auto unmounted = [&](int rc) {
    std::string counts = view->stats_text();
    counts = counts.substr(0, counts.find("\npid "));
    std::replace(counts.begin(), counts.end(), '\n', ' ');
    spdlog::info("unmounted {}: {}", mountpoint, counts);
    return rc;
  };
  auto tune = [&] {
    if (o.read_ahead_kb && !set_read_ahead(mountpoint, o.read_ahead_kb))
      spdlog::debug("{}: read_ahead_kb left as is (needs root)", mountpoint);
  };
  if (o.foreground || o.debug) {
    std::thread tuner;
    const int rc = fuse::serve(*view, cfg, [&](const std::string& err) {
      if (!err.empty()) return spdlog::error("{}", err);
      spdlog::info("{}", summary);
      tuner = std::thread([&] {  // after INIT: the first stat waits for it
        struct stat st;
        if (::stat(mountpoint.c_str(), &st) == 0) tune();
      });
    });
    if (tuner.joinable()) tuner.join();
    return unmounted(rc);
  }
  const int rc = run_in_background(
      mountpoint,
      [&](const std::function<void(const std::string&)>& mounted) {
        return unmounted(fuse::serve(*view, cfg, [&](const std::string& err) {
          if (err.empty()) spdlog::info("{}", summary);
          mounted(err);
        }));
      },
      o.log_file);
  if (rc == 0) tune();
  return rc;
}

namespace {

// --html FILE: written whole, then renamed, so that a reader never sees half a page.
void write_page(const std::string& path, const std::string& page) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << page;
    if (!out.flush()) throw Error(tmp + ": cannot write: " + std::strerror(errno), EIO);
  }
  fs::rename(tmp, path);
}

}  // namespace

int verify(const std::string& path, const std::string& tag, bool json, const std::string& html) {
  const check::Findings f = check::verify(path, tag);
  std::cout << (json ? check::json(f) : check::text(f));
  if (!html.empty()) write_page(html, check::html(f));
  return f.exit_code();
}

int diff(const std::string& a, const std::string& b, const DiffArgs& d, bool json, const std::string& html) {
  check::DiffOptions o;
  o.tag_a = d.tag_a;
  o.tag_b = d.tag_b;
  o.atol = d.atol;
  o.rtol = d.rtol;
  const check::DiffResult r = check::diff(a, b, o);
  std::cout << (json ? check::json(r) : check::text(r));
  if (!html.empty()) write_page(html, check::html(r));
  return r.exit_code();
}

}  // namespace zm::cli
