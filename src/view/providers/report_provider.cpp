// report.html: a page per tag in <T>_params/, a page across the tags of each checkpoint
// folder beside them, and one in each run folder across the tags of the checkpoint folders below
// it (a Trainer's output_dir holds one tag per checkpoint-N/). No report file with -o report=off.
#include "zeromount/view/files/report_html.h"
#include "zeromount/view/files/report_page.h"
#include "zeromount/view/files/report_run.h"
#include "zeromount/view/provider.h"
#include "zeromount/view/view_options.h"

namespace zm::view {

namespace {

constexpr const char* kPage = "report.html";

// Whether everyone `page` lets read it may read `tag`'s shards too: adding the tag to what the
// page is made from takes no read bit away (least_of's rule).
bool covers(const Access& tag, const Access& page) {
  return (least_of({page, tag}).perm & 0444) == (page.perm & 0444);
}

// The tags a page across tags shows; those whose shards fewer may read than the page go to `left_out`.
std::vector<NamedTag> shown(const CheckpointFolder& folder, const Access& page, std::vector<std::string>& left_out) {
  std::vector<NamedTag> tags;
  for (NamedTag& t : folder.served_tags()) {
    if (covers(t.tag->files, page))
      tags.push_back(std::move(t));
    else
      left_out.push_back(t.path + ": its shards are readable by fewer users than this page");
  }
  return tags;
}

class ReportProvider final : public Provider {
 public:
  std::string_view kind() const override { return "report"; }

  void add_tag(ProviderContext& cx, const MountedTag& tag) const override {
    if (!cx.options().report) return;
    const Inode* params = cx.tree().lookup(cx.dir(), tag.index->tag + "_params");
    if (!params || !params->made_by || params->made_by->kind() != "params") return;
    const MountedTag* t = &tag;
    const pt::ExtentReader* files = &cx.files();
    // Sized by laying the page out without its figures: stat reads no tensor.
    cx.tree().add_file(
        params->ino, kPage, cx.mtime(),
        [t, files] { return report_file(tag_report(*t, tag_figures(*t, *files).get()), t->file_of_shard); },
        [t] { return uint64_t(tag_report(*t, nullptr).size()); });
  }

  // The page is the folder's to read, whatever its tags are: one rule for a tag restricted at the
  // mount and one saved later, each named on the page and not shown. A page
  // as restricted as its most restricted tag locked every other user out of all the others.
  void add_folder(ProviderContext& cx, const std::vector<const MountedTag*>&) const override {
    if (cx.options().report) add_across(cx, cx.tree().get(cx.dir())->access);
  }

  // The checkpoint folders below are indexed to size the page.
  void add_run(ProviderContext& cx) const override {
    if (cx.options().report) add_across(cx, cx.tree().get(cx.dir())->access);
  }

 private:
  // A live page: the tags it shows are asked for on every open and stat, so that it is never
  // stale against what the folder serves; their figures are kept by identity (report_figures.h).
  // Its size is its text laid out, a row per parameter of every tag (19 MB for one tag of 20,000
  // parameters): a listing does not ask it (`costly`), or every `ls` of the mount paid that
  // (bench/concurrent_ls.py); a stat does.
  void add_across(ProviderContext& cx, Access access) const {
    constexpr bool costly = true;
    const CheckpointFolder* folder = &cx.folder();
    const pt::ExtentReader* files = &cx.files();
    cx.add_made_live_file(
        kPage, *this,
        [folder, files, access] {
          std::vector<std::string> left_out;
          const std::vector<NamedTag> tags = shown(*folder, access, left_out);
          const RunFigures figures = run_figures(tags, *files);
          std::vector<uint32_t> shards;
          for (const NamedTag& t : tags)
            shards.insert(shards.end(), t.tag->file_of_shard.begin(), t.tag->file_of_shard.end());
          return report_file(run_report(folder->mount_path(), tags, left_out, &figures), std::move(shards));
        },
        [folder, access] {
          std::vector<std::string> left_out;
          const std::vector<NamedTag> tags = shown(*folder, access, left_out);
          return uint64_t(run_report(folder->mount_path(), tags, left_out, nullptr).size());
        },
        access, costly);
  }
};

}  // namespace

std::unique_ptr<Provider> make_report_provider() {
  return std::make_unique<ReportProvider>();
}

}  // namespace zm::view
