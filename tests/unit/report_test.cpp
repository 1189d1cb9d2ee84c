// The report pages' arithmetic against brute force, and their sizes: what stat says (laid out
// without reading a tensor) is what a reader gets, for every fixture and for hostile values.
// (tests/py/test_report.py loads the pages in a real browser and checks their numbers.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>

#include "helpers.h"
#include "view_helpers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/view/files/number_rules.h"
#include "zeromount/view/files/report_html.h"
#include "zeromount/view/files/report_page.h"
#include "zeromount/view/files/report_run.h"
#include "zeromount/view/files/stats.h"
#include "zeromount/view/provider.h"

namespace zm {
namespace {

namespace fs = std::filesystem;
using test::at;
using test::content_of;
using test::find;
using view::GridHistogram;

// Floats across the whole range: both signs, denormals, zeros, the largest finite values.
std::vector<float> spread_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v;
  for (size_t k = 0; k < n; ++k) {
    uint32_t bits = rng();
    if ((bits & 0x7F800000u) == 0x7F800000u) bits &= ~0x00800000u;  // no NaN or inf
    v.push_back(std::bit_cast<float>(bits));
  }
  for (float x : {0.0f, -0.0f, 1e-45f, -1e-45f, 3.4028235e38f, -3.4028235e38f, 1.0f, -1.0f}) v.push_back(x);
  return v;
}

TEST(GridHistogram, EveryValueLiesInItsBucketAndBucketsFollowTheValues) {
  std::vector<float> v = spread_values(200000, 1);
  std::sort(v.begin(), v.end());
  for (size_t k = 0; k < v.size(); ++k) {
    const uint32_t b = GridHistogram::bucket(v[k]);
    ASSERT_LE(GridHistogram::lower(b), double(v[k])) << v[k];
    ASSERT_LT(double(v[k]), GridHistogram::lower(b + 1)) << v[k];
    if (k) {
      ASSERT_LE(GridHistogram::bucket(v[k - 1]), b) << v[k - 1] << " " << v[k];
    }
  }
}

TEST(GridHistogram, TheMedianBucketHoldsTheMiddleValue) {
  for (uint32_t seed : {2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    std::lognormal_distribution<float> d(-3, 2);
    std::vector<float> v(100001 + seed);
    for (float& x : v) x = d(rng) * (rng() & 1 ? 1 : -1);
    v.push_back(NAN);  // not counted
    GridHistogram h;
    h.add(v.data(), v.size());
    v.pop_back();
    ASSERT_EQ(h.total(), v.size());
    const size_t k = (v.size() - 1) / 2;
    std::nth_element(v.begin(), v.begin() + long(k), v.end());
    const uint32_t b = h.bucket_of_rank(k);
    EXPECT_LE(GridHistogram::lower(b), v[k]);
    EXPECT_LT(v[k], GridHistogram::lower(b + 1));
  }
}

// Each bin's count is the number of values between its edges, counted directly.
void expect_exact(const view::Bins& bins, const std::vector<float>& v) {
  ASSERT_EQ(bins.edges.size(), bins.counts.size() + 1);
  ASSERT_LE(bins.counts.size(), view::kReportBins);
  uint64_t total = 0;
  for (size_t i = 0; i < bins.counts.size(); ++i) {
    const uint64_t n = uint64_t(std::count_if(
        v.begin(), v.end(), [&](float x) { return double(x) >= bins.edges[i] && double(x) < bins.edges[i + 1]; }));
    EXPECT_EQ(bins.counts[i], n) << "bin " << i;
    EXPECT_LT(bins.edges[i], bins.edges[i + 1]);
    total += n;
  }
  EXPECT_EQ(total, v.size()) << "every value in a bin";
}

TEST(ReportBins, CountsAreExactForTheEdgesShown) {
  std::mt19937 rng(5);
  std::normal_distribution<float> w(0.01f, 0.02f);
  std::lognormal_distribution<float> sq(-18, 3);
  std::vector<float> weights(50000), moments(50000);
  for (float& x : weights) x = w(rng);
  for (float& x : moments) x = sq(rng);
  moments[0] = 0;
  for (const auto* v : {&weights, &moments}) {
    GridHistogram h;
    h.add(v->data(), v->size());
    expect_exact(view::linear_bins(h), *v);
    expect_exact(view::octave_bins(h), *v);
  }
  for (const std::vector<float>& few :
       std::vector<std::vector<float>>{{1.5f}, {2, 2, 2}, {-3e38f, 3e38f}, {0, 1e-40f}}) {
    GridHistogram h;
    h.add(few.data(), few.size());
    expect_exact(view::linear_bins(h), few);
    expect_exact(view::octave_bins(h), few);
  }
}

TEST(ReportStats, BlocksMergeToTheStatisticsOfTheWhole) {
  std::mt19937 rng(6);
  std::normal_distribution<double> d(1000, 0.001);  // a large mean: naive sums of squares lose the variance
  std::vector<float> v(300000);
  for (float& x : v) x = float(d(rng));
  v[7] = NAN;
  v[8] = -INFINITY;
  view::Stats s;
  for (size_t at = 0; at < v.size(); at += 65536) s.add(v.data() + at, std::min<size_t>(65536, v.size() - at));
  double sum = 0, lo = INFINITY, hi = -INFINITY, sq = 0;
  size_t n = 0;
  for (float x : v)
    if (std::isfinite(x))
      sum += x, sq += double(x) * x, lo = std::min<double>(lo, x), hi = std::max<double>(hi, x), ++n;
  const double mean = sum / double(n);
  double m2 = 0;
  for (float x : v)
    if (std::isfinite(x)) m2 += (x - mean) * (x - mean);
  EXPECT_EQ(s.n, n);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(s.lowest(), lo);
  EXPECT_EQ(s.highest(), hi);
  EXPECT_NEAR(s.average(), mean, 1e-9 * std::fabs(mean));
  EXPECT_NEAR(s.deviation(), std::sqrt(m2 / double(n)), 1e-6 * std::sqrt(m2 / double(n)));
  EXPECT_NEAR(s.l2(), std::sqrt(sq), 1e-9 * std::sqrt(sq));
}

// Brute force: the finite values' count, extremes, mean, deviation and norm, and the others counted.
struct Brute {
  size_t n = 0, nan = 0, inf = 0;
  double lo = INFINITY, hi = -INFINITY, mean = 0, dev = 0, l2 = 0;
};
Brute brute(const std::vector<double>& v) {
  Brute b;
  double sum = 0, sq = 0;
  for (double x : v)
    if (std::isfinite(x))
      ++b.n, sum += x, sq += x * x, b.lo = std::min(b.lo, x), b.hi = std::max(b.hi, x);
    else
      ++(std::isnan(x) ? b.nan : b.inf);
  b.mean = b.n ? sum / double(b.n) : 0;
  double m2 = 0;
  for (double x : v)
    if (std::isfinite(x)) m2 += (x - b.mean) * (x - b.mean);
  b.dev = b.n ? std::sqrt(m2 / double(b.n)) : 0;
  b.l2 = std::sqrt(sq);
  return b;
}

void expect_stats(const view::Stats& s, const Brute& b, const std::string& what) {
  EXPECT_EQ(s.n, b.n) << what;
  EXPECT_EQ(s.nan, b.nan) << what;
  EXPECT_EQ(s.inf, b.inf) << what;
  if (!b.n) {
    EXPECT_TRUE(std::isnan(s.lowest()) && std::isnan(s.average())) << what;
    return;
  }
  EXPECT_EQ(s.lowest(), b.lo) << what;
  EXPECT_EQ(s.highest(), b.hi) << what;
  EXPECT_NEAR(s.average(), b.mean, 1e-12 * std::max(1.0, std::fabs(b.mean))) << what;
  EXPECT_NEAR(s.deviation(), b.dev, 1e-9 * std::max(1e-30, b.dev) + 1e-300) << what;
  EXPECT_NEAR(s.l2(), b.l2, 1e-12 * b.l2) << what;
}

// Every block length around the four-value lanes, each with and without a value that is not
// finite at every place (first, last, middle), in floats and doubles: the one-pass lanes and the
// careful way give the brute-force statistics.
TEST(ReportStats, EveryBlockLengthAndEveryPlaceOfANaNOrInf) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(3, 2);
  for (size_t len = 0; len <= 11; ++len)
    for (size_t bad = 0; bad <= len; ++bad)
      for (float odd : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> f(len);
        for (float& x : f) x = d(rng);
        if (bad < len) f[bad] = odd;  // bad == len: all finite
        const std::vector<double> v(f.begin(), f.end());
        const std::string what = "length " + std::to_string(len) + ", odd value at " + std::to_string(bad);
        view::Stats sf, sd;
        sf.add(f.data(), f.size());
        sd.add(v.data(), v.size());
        expect_stats(sf, brute(v), what + " (float)");
        expect_stats(sd, brute(v), what + " (double)");
      }
}

// The Adam update size in double, |m| / (sqrt(v) + eps), element by element: its statistics, and
// each size rounded once to float, whatever the length and wherever a negative v (NaN) sits.
TEST(ReportStats, UpdateSizesAreTheDoubleFormulaElementByElement) {
  std::mt19937 rng(8);
  std::normal_distribution<float> d(0, 1e-3f);
  for (size_t len : {0, 1, 3, 4, 5, 8, 13, 1000}) {
    for (int negative : {-1, 0, 1}) {
      std::vector<float> m(len), v(len), out(len);
      for (size_t k = 0; k < len; ++k) {
        m[k] = d(rng);
        v[k] = d(rng) * d(rng);
        v[k] = std::fabs(v[k]);
      }
      if (negative >= 0 && len) v[negative ? len - 1 : 0] = -1e-6f;
      const double eps = 1e-8;
      std::vector<double> want(len);
      for (size_t k = 0; k < len; ++k) want[k] = std::fabs(double(m[k])) / (std::sqrt(double(v[k])) + eps);
      view::Stats s;
      view::add_update_sizes(s, m.data(), v.data(), eps, len, out.data());
      const std::string what = "length " + std::to_string(len) + ", negative v " + std::to_string(negative);
      expect_stats(s, brute(want), what);
      for (size_t k = 0; k < len; ++k) {
        if (std::isnan(want[k])) {
          EXPECT_TRUE(std::isnan(out[k])) << what << " at " << k;
          continue;
        }
        EXPECT_EQ(out[k], float(want[k])) << what << " at " << k;
      }
    }
  }
}

// What stat says of every report page of `v` is what a reader reads.
void expect_sizes_known_at_stat(const view::View& v, const std::vector<std::string>& pages) {
  for (const auto& page : pages) {
    const view::Inode& n = at(v, page);
    const uint64_t said = uint64_t(v.attr(n).st_size);
    const std::string html = content_of(v, n);
    EXPECT_EQ(said, html.size()) << page;
    EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u) << page;
    EXPECT_EQ(html.find("http"), std::string::npos) << page << ": nothing to fetch";
  }
}

TEST(ReportPages, EveryFixtureIsSizedWithoutReadingATensor) {
  for (const auto& e : fs::directory_iterator(test::kFixtures)) {
    const std::string ckpt = e.path().string() + "/checkpoint";
    if (!fs::exists(ckpt + "/latest")) continue;
    auto v = view::View::load(ckpt);
    std::vector<std::string> pages;
    for (const auto& t : ds::scan_checkpoint(ckpt).tags)
      if (find(*v, "/" + t + "_params")) pages.push_back("/" + t + "_params/report.html");
    SCOPED_TRACE(ckpt);
    if (pages.empty()) {  // a refused source (native MoE): nothing served, nothing to report
      EXPECT_EQ(find(*v, "/report.html"), nullptr);
      continue;
    }
    pages.push_back("/report.html");
    expect_sizes_known_at_stat(*v, pages);
    // A listing of the folder does not lay the page out (a row per parameter of every tag: every
    // `ls` of a 20,000-parameter mount took 0.6 s, bench/concurrent_ls.py); a stat does.
    EXPECT_FALSE(v->attr_ready(at(*v, "/report.html")));
  }
}

// The layer charts are labelled: the largest bar's value at the top of each (the norm of the
// largest layer, as its bar's title says it), and the first layer's name under its bar.
TEST(ReportPages, LayerBarsAreLabelled) {
  auto v = view::View::load(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint");
  const std::string page = content_of(*v, at(*v, "/global_step3_params/report.html"));
  const std::regex top(R"re(class="lg">\s*([^<\s]+)</text><text[^>]*class="lg">0</text>)re"),
      first(R"re(<rect[^>]*><title>([^:<]*): ([^<]*)</title></rect><text[^>]*class="bl">([^<]*)</text>)re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(page, m, top)) << "no value axis on the layer charts";
  const double most = std::stod(m[1]);
  EXPECT_GT(most, 0);
  double largest = 0;
  const std::regex bar(R"re(<rect[^>]*><title>[^:<]*: ([^<]*)</title></rect>)re");
  const std::string first_chart = page.substr(0, page.find("</svg>", m.position(0)));
  for (std::sregex_iterator it(first_chart.begin(), first_chart.end(), bar), end; it != end; ++it)
    largest = std::max(largest, std::stod((*it)[1]));
  EXPECT_NEAR(most, largest, 0.006 * largest);  // "%.3g"
  ASSERT_TRUE(std::regex_search(page, m, first)) << "no layer label under the bars";
  const std::string layer = m[1], label = m[3];
  EXPECT_EQ(label, layer.substr(layer.rfind('.') == std::string::npos ? 0 : layer.rfind('.') + 1).substr(0, 7));
}

// fc1.bias all NaN, one weight of fc1.weight +inf and one -inf, exp_avg_sq of fc2.bias all inf.
std::string hostile_copy(const std::string& fixture) {
  const std::string ckpt = test::temp_dir() + "/ckpt";
  test::copy_fixture(fixture + "/checkpoint", ckpt);
  auto ix = ds::index_tag(ckpt + "/global_step3");
  // Element k of a state becomes value(k), where that is not nothing.
  const auto write = [&](const char* name, size_t state, const std::function<std::optional<float>(uint64_t)>& value) {
    const ds::Param* p = ix->find(name);
    uint64_t k = 0;
    for (const auto& f : ix->fragments(*p, state)) {
      std::fstream io(ix->shards.at(f.extent.file).path, std::ios::in | std::ios::out | std::ios::binary);
      for (uint64_t e = 0; e < f.numel; ++e, ++k)
        if (const std::optional<float> x = value(k)) {
          io.seekp(std::streamoff(f.extent.offset + e * 4));
          io.write(reinterpret_cast<const char*>(&*x), 4);
        }
    }
  };
  write("fc1.bias", 0, [](uint64_t) { return NAN; });
  write("fc1.weight", 0, [](uint64_t k) -> std::optional<float> {
    if (k == 3) return INFINITY;
    if (k == 5) return -INFINITY;
    return std::nullopt;
  });
  write("fc2.bias", 2, [](uint64_t) { return INFINITY; });
  return ckpt;
}

TEST(ReportPages, HostileValuesKeepTheSizeAndAreShownAsSuch) {
  auto v = view::View::load(hostile_copy("z2_ws2_fp32_pg2"));
  expect_sizes_known_at_stat(*v, {"/report.html", "/global_step3_params/report.html"});
  const std::string html = content_of(*v, at(*v, "/global_step3_params/report.html"));
  EXPECT_NE(html.find("<span class=\"v b\"> 30</span>"), std::string::npos) << "30 NaN of fc1.bias, in red";
  // fc1 holds NaN and inf, but a finite norm too: its bar is red at that height, not a full one.
  const size_t title = html.find("<title>fc1: ");
  ASSERT_NE(title, std::string::npos);
  const std::string rect = html.substr(html.rfind("<rect", title), title - html.rfind("<rect", title));
  EXPECT_NE(rect.find("class=\"b\""), std::string::npos) << rect;
  EXPECT_EQ(rect.find("height=\"100.0\""), std::string::npos) << rect;
}

// A tag's page shows its verify verdict (issue 42), from the page's own pass: the hostile copy's
// NaN and inf fail "finite", by name, with the first subject; a real fixture's page passes.
TEST(ReportPages, ACraftedBadTagShowsItsVerifyVerdict) {
  const auto section = [](const std::string& html) {
    const size_t from = html.find("<h2 id=\"verify\">");
    return from == std::string::npos ? std::string() : html.substr(from, html.find("</table>", from) - from);
  };
  auto bad = view::View::load(hostile_copy("z2_ws2_fp32_pg2"));
  const std::string page = section(content_of(*bad, at(*bad, "/global_step3_params/report.html")));
  ASSERT_FALSE(page.empty()) << "no Verify section";
  EXPECT_NE(page.find("verdict: <b class=\"b\">fail</b>"), std::string::npos) << page;
  EXPECT_NE(page.find("<td>finite</td><td><b class=\"b\">fail</b>"), std::string::npos) << page;
  EXPECT_NE(page.find("first: <code>fc"), std::string::npos) << page;
  EXPECT_NE(page.find("<td>exp_avg_sq-nonnegative</td><td><b class=\"g\">pass</b>"), std::string::npos) << page;
  auto good = view::View::load(test::kFixtures + "/z2_ws2_fp32_pg2/checkpoint");
  const std::string clean = section(content_of(*good, at(*good, "/global_step3_params/report.html")));
  EXPECT_NE(clean.find("verdict: <b class=\"g\">pass</b>"), std::string::npos) << clean;
  EXPECT_EQ(clean.find("fail"), std::string::npos) << clean;
}

// Keep-last-N cleanup before anyone looked: the page is sized from what was kept (the model-state
// file is gone, so the index's order), and a listing of the folder with its attributes works.
TEST(ReportPages, ATagDeletedBeforeItsPageIsSizedStillListsAndStats) {
  const std::string ckpt = test::temp_dir() + "/ckpt";
  test::copy_fixture("z2_ws2_fp32_pg2/checkpoint", ckpt);
  auto v = view::View::load(ckpt);
  fs::remove_all(ckpt + "/global_step3");
  const view::Inode& params = at(*v, "/global_step3_params");
  size_t listed = 0;
  for (uint64_t k = 0;; ++listed) {
    const auto e = v->dir_entry(params, k);
    if (!e) break;
    if (v->attr_ready(*e->node)) {  // what ls -l asks
      EXPECT_NO_THROW(v->attr(*e->node)) << e->name;
    }
    k = e->next;
  }
  EXPECT_GT(listed, 10u);
  EXPECT_GT(v->attr(at(*v, "/global_step3_params/report.html")).st_size, 1000);
}

// least_of against the kernel's rule (Caller::may: the first class that matches decides): whoever
// may read the least of some entries may read each of them, for every owner, group and mode mix.
TEST(AccessLeastOf, WhoMayReadTheLeastMayReadEach) {
  std::mt19937 rng(7);
  std::vector<view::Caller> callers;
  for (uid_t u : {1u, 2u, 3u})
    for (gid_t g : {10u, 20u, 30u}) callers.push_back({0, u, g, {g == 10u ? 20u : 10u}});
  for (int round = 0; round < 20000; ++round) {
    std::vector<view::Access> all;
    for (int k = 0, n = 2 + int(rng() % 2); k < n; ++k)
      all.push_back({uint32_t(rng() % 01000), uid_t(1 + rng() % 3), gid_t(10 * (1 + rng() % 3)), true});
    const view::Access least = view::least_of(all);
    for (const view::Caller& c : callers)
      if (c.may(least, 0444)) {
        for (const view::Access& x : all) {
          ASSERT_TRUE(c.may(x, 0444)) << "uid " << c.uid << " gid " << c.gid;
        }
      }
  }
}

TEST(ReportPages, NoReportFilesWithReportOff) {
  view::ViewOptions o;
  o.report = false;
  auto v = view::View::load(test::kFixtures + "/z3_ws2_fp32_pg2/checkpoint", o);
  EXPECT_EQ(find(*v, "/report.html"), nullptr);
  EXPECT_EQ(find(*v, "/global_step3_params/report.html"), nullptr);
  EXPECT_NE(find(*v, "/global_step3_params/summary"), nullptr);
}

TEST(ReportPages, ARunFolderPageIndexesItsCheckpointsWhenStatNotWhenListed) {
  const std::string src = test::temp_dir() + "/out";
  test::copy_fixture("hf/gpt2_z2/run", src);
  auto v = view::View::load(src);
  const view::Inode& page = at(*v, "/report.html");
  EXPECT_FALSE(v->attr_ready(page)) << "a listing does not size it";
  EXPECT_NE(content_of(*v, at(*v, "/.zeromount/stats")).find("tags_served 0\n"), std::string::npos);
  expect_sizes_known_at_stat(*v, {"/report.html"});
  const std::string html = content_of(*v, page);
  for (const char* tag : {"checkpoint-2/global_step2", "checkpoint-4/global_step4"})
    EXPECT_NE(html.find(std::string("<code>") + tag + "</code>"), std::string::npos) << tag;
  EXPECT_NE(content_of(*v, at(*v, "/.zeromount/stats")).find("tags_served 2\n"), std::string::npos);
}

// Issue 27: a run page's axis said "12.2" at both ends of a line that rose from 12.21 to 12.25.
TEST(ReportAxis, LabelsTellTheEndsApartInAFixedWidth) {
  const auto trim = [](std::string s) {
    s.erase(s.find_last_not_of(' ') + 1);
    return s.erase(0, std::min(s.find_first_not_of(' '), s.size()));
  };
  auto [lo, hi] = view::html::axis_labels(12.21, 12.25, 10);
  EXPECT_EQ(trim(lo), "12.21");
  EXPECT_EQ(trim(hi), "12.25");
  EXPECT_EQ(lo.size(), 10u);
  std::tie(lo, hi) = view::html::axis_labels(0.5, 1.5, 10);
  EXPECT_EQ(trim(lo), "0.5");
  EXPECT_EQ(trim(hi), "1.5");
  std::tie(lo, hi) = view::html::axis_labels(3.0, 3.0, 10);  // one value: one label
  EXPECT_EQ(trim(lo), "");
  EXPECT_EQ(trim(hi), "3");
  std::tie(lo, hi) = view::html::axis_labels(NAN, NAN, 10);
  EXPECT_EQ(trim(lo) + trim(hi), "");
  std::tie(lo, hi) = view::html::axis_labels(1.0000000001, 1.0000000002, 10);  // too close for 10 characters
  EXPECT_NE(trim(lo), trim(hi));
}

// The rule for packed experts, case by case (number_rules.h).
TEST(PackedExperts, TheNameAndShapeDecide) {
  using view::packed_experts;
  EXPECT_EQ(packed_experts("model.layers.0.mlp.experts.gate_up_proj", {8, 192, 64}), 8u);  // transformers 5
  EXPECT_EQ(packed_experts("model.layers.3.mlp.experts.down_proj", {8, 64, 96}), 8u);
  EXPECT_EQ(packed_experts("layers.1.moe.experts.w1", {16, 32, 8}), 16u);  // AutoEP
  EXPECT_EQ(packed_experts("model.layers.0.mlp.experts.5.w1.weight", {96, 64, 3}), 0u) << "unpacked: a sibling";
  EXPECT_EQ(packed_experts("model.layers.0.mlp.experts.gate_up_proj_bias", {8, 192}), 0u) << "2-D";
  EXPECT_EQ(packed_experts("model.layers.0.mlp.gate.weight", {8, 64, 2}), 0u) << "no experts component";
  EXPECT_EQ(packed_experts("model.layers.0.mlp.experts", {8, 64, 2}), 0u) << "nothing after it";
  EXPECT_EQ(packed_experts("model.layers.0.mlp.experts.w1", {1, 64, 2}), 0u) << "one expert";
  EXPECT_EQ(packed_experts("model.layers.0.mlp.experts.w1", {4097, 2, 2}), 0u) << "over the cap";
  EXPECT_EQ(packed_experts("model.layers.0.mlp.shared_experts.w1", {8, 64, 2}), 0u) << "another module name";
}

// ExpertSums cuts blocks where a slice ends: each expert's sum of squares is that of its finite
// values however the blocks fall, and the parameter's statistics are those of one add.
TEST(PackedExperts, SumsPerExpertDoNotDependOnTheBlocks) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const size_t experts = 5, per = 7;
  std::vector<float> x(experts * per);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * float(1 + i / per);
  x[3 * per + 2] = NAN;
  x[4 * per] = INFINITY;
  std::vector<double> want(experts, 0);
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i])) want[i / per] += double(x[i]) * double(x[i]);
  view::Stats whole;
  whole.add(x.data(), x.size());
  for (size_t block : {1, 3, 4, 7, 9, 35}) {
    view::Stats s;
    view::ExpertSums sums(experts, x.size());
    for (size_t at = 0; at < x.size(); at += block) sums.add(s, x.data() + at, std::min(block, x.size() - at));
    ASSERT_TRUE(sums.packed());
    EXPECT_EQ(sums.per_expert(), per);
    for (size_t e = 0; e < experts; ++e) EXPECT_NEAR(sums.sumsq()[e], want[e], 1e-12 * want[e]) << block << " " << e;
    EXPECT_EQ(s.n, whole.n);
    EXPECT_EQ(s.nan, 1u);
    EXPECT_EQ(s.inf, 1u);
    EXPECT_NEAR(s.sumsq, whole.sumsq, 1e-12 * whole.sumsq);
    EXPECT_NEAR(s.m2, whole.m2, 1e-9 * whole.m2);
  }
}

// Packed experts (issue 43): <param>/info lists every expert's L2 norm and RMS, and the report
// page's verdict and Experts section flag an expert whose RMS is off the experts' median by more
// than 4x. Crafted on a real Trainer + DeepSpeed Mixtral run: expert 2 of layer 0's gate_up_proj
// scaled to 1/20 (a reset to a small initialisation). The norms are checked against sums of
// squares taken here from the shard bytes, and the unmodified run is not flagged.
struct ExpertLine {
  double norm, rms;
  std::string outlier;
};

std::vector<ExpertLine> expert_lines(const std::string& info) {
  std::vector<ExpertLine> out;
  const std::regex line(R"re(expert +(\d+) +L2 norm +(\S+) +RMS +(\S+) +norm-outlier +(\S+))re");
  for (std::sregex_iterator it(info.begin(), info.end(), line), end; it != end; ++it) {
    EXPECT_EQ(std::stoul((*it)[1]), out.size());
    out.push_back({std::stod((*it)[2]), std::stod((*it)[3]), (*it)[4]});
  }
  return out;
}

std::string verify_row(const std::string& html, const std::string& check) {
  const size_t at = html.find("<td>" + check + "</td>");
  return at == std::string::npos ? "" : html.substr(at, html.find("</tr>", at) - at);
}

TEST(ReportPages, AResetExpertOfAPackedParameterIsFlagged) {
  const std::string ckpt = test::moe_copy_with_expert(test::kPackedGateUp, 2, 0.05f, false);
  auto v = view::View::load(ckpt);
  const auto ix = ds::index_tag(ckpt + "/global_step2");
  const std::vector<double> want = test::expert_sumsq(*ix, test::kPackedGateUp, 0);
  ASSERT_EQ(want.size(), 4u);
  const uint64_t per = ix->find(test::kPackedGateUp)->numel / 4;
  const view::Inode& info_file = at(*v, "/global_step2_params/" + test::kPackedGateUp + "/info");
  const std::string info = content_of(*v, info_file);
  EXPECT_EQ(uint64_t(v->attr(info_file).st_size), info.size()) << "sized before reading";
  const auto lines = expert_lines(info);
  ASSERT_EQ(lines.size(), 4u) << info;
  for (size_t e = 0; e < 4; ++e) {
    EXPECT_NEAR(lines[e].norm, std::sqrt(want[e]), 1e-7 * std::sqrt(want[e])) << e;
    EXPECT_NEAR(lines[e].rms, std::sqrt(want[e] / double(per)), 1e-7 * std::sqrt(want[e] / double(per))) << e;
    EXPECT_EQ(lines[e].outlier, e == 2 ? "yes" : "no") << info;
  }
  expect_sizes_known_at_stat(*v, {"/global_step2_params/report.html"});
  const std::string html = content_of(*v, at(*v, "/global_step2_params/report.html"));
  const std::string row = verify_row(html, "norm-outlier");
  EXPECT_NE(row.find("<b class=\"g\">warn</b>  1 of 16"), std::string::npos) << row;  // red is for fail
  EXPECT_NE(row.find("first: <code>" + test::kPackedGateUp + " expert 2"), std::string::npos) << row;
  EXPECT_NE(html.find("<h2 id=\"experts\">"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"#experts\">Experts</a>"), std::string::npos);
  const std::regex bar(
      R"re(<rect[^>]*class="(.)"><title>model\.layers\.0\.mlp\.experts\.gate_up_proj expert (\d): RMS +(\S+),)re");
  size_t bars = 0;
  for (std::sregex_iterator it(html.begin(), html.end(), bar), end; it != end; ++it, ++bars) {
    const size_t e = std::stoul((*it)[2]);
    EXPECT_EQ((*it)[1], e == 2 ? "b" : "g") << "expert " << e << " red exactly when flagged";
    EXPECT_NEAR(std::stod((*it)[3]), lines[e].rms, 1e-7 * lines[e].rms);
  }
  EXPECT_EQ(bars, 4u);

  auto real = view::View::load(test::kFixtures + "/" + test::kMoeRun);
  for (const char* layer : {"0", "1"})
    for (const char* proj : {"gate_up_proj", "down_proj"}) {
      const std::string name = std::string("model.layers.") + layer + ".mlp.experts." + proj;
      const auto got = expert_lines(content_of(*real, at(*real, "/global_step2_params/" + name + "/info")));
      ASSERT_EQ(got.size(), 4u) << name;
      for (const auto& l : got) EXPECT_EQ(l.outlier, "no") << name;
    }
  const std::string clean = content_of(*real, at(*real, "/global_step2_params/report.html"));
  EXPECT_NE(verify_row(clean, "norm-outlier").find("<b class=\"g\">pass</b>"), std::string::npos)
      << verify_row(clean, "norm-outlier");
}

// An expert whose exp_avg_sq slice is all zero after a step never had a gradient: the page's
// moments-not-reset warns, naming the expert, and its bar is red.
TEST(ReportPages, AnExpertWithoutGradientIsFlagged) {
  const std::string ckpt = test::moe_copy_with_expert(test::kPackedGateUp, 1, 1.0f, true);
  auto v = view::View::load(ckpt);
  const std::string html = content_of(*v, at(*v, "/global_step2_params/report.html"));
  const std::string row = verify_row(html, "moments-not-reset");
  EXPECT_NE(row.find("<b class=\"g\">warn</b>  1 of"), std::string::npos) << row;
  EXPECT_NE(row.find("first: <code>" + test::kPackedGateUp + " expert 1 exp_avg_sq"), std::string::npos) << row;
  EXPECT_NE(html.find("expert 1: RMS"), std::string::npos);
  EXPECT_NE(html.find("exp_avg_sq all zero yes"), std::string::npos);
}

}  // namespace
}  // namespace zm
