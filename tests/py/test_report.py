"""The report pages in a real browser: Debian's chromium, headless, loads them from real mounts.
Every parameter has its row and plots, the numbers equal <param>/info and an independent numpy
computation (the fixtures' live engine state, gen_ckpt's ground truth), sorting by a column works
without a script, and the page asks the network for nothing. Screenshots are kept under the build
folder (report-artifacts/)."""
import errno
import html.parser
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest
import torch

from conftest import BUILD, FIXTURES, ZEROMOUNT, live_state, mount

TAG = "global_step3"
HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "tools", "gen_ckpt.py")
ARTIFACTS = os.environ.get("ZM_ARTIFACTS", os.path.join(BUILD, "tests", "report-artifacts"))
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (scripts/deps.sh installs it)")
QUIET = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(url, *extra, shot=None, size="1500,1200"):
    """chromium --dump-dom of url (a fresh profile each time); with `shot`, a screenshot too."""
    with tempfile.TemporaryDirectory() as profile:
        args = [CHROMIUM, *QUIET, f"--user-data-dir={profile}", *extra]
        if shot:
            os.makedirs(ARTIFACTS, exist_ok=True)
            subprocess.run(args + [f"--screenshot={os.path.join(ARTIFACTS, shot)}", f"--window-size={size}", url],
                           capture_output=True, timeout=180)
            assert os.path.getsize(os.path.join(ARTIFACTS, shot)) > 1000, "a screenshot was taken"
        r = subprocess.run(args + ["--dump-dom", url], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout


class Node:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.children, self.text = tag, dict(attrs), [], ""

    def all(self, tag=None, cls=None):
        for c in self.children:
            if (tag is None or c.tag == tag) and (cls is None or cls in c.attrs.get("class", "").split()):
                yield c
            yield from c.all(tag, cls)

    def title(self):
        return next((c.text for c in self.children if c.tag == "title"), None)


class Dom(html.parser.HTMLParser):
    """The DOM chromium dumped, as a tree of Nodes (text kept per element, not interleaved)."""
    VOID = {"meta", "br", "link", "img", "input", "hr", "wbr", "source"}  # SVG elements are closed in a dump

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs)
        self.stack[-1].children.append(n)
        if tag not in self.VOID:
            self.stack.append(n)

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while len(self.stack) > 1 and self.stack.pop().tag != tag:
            pass

    def handle_data(self, data):
        self.stack[-1].text += data


def text_of(n):
    return n.text + "".join(text_of(c) for c in n.children if c.tag != "title")


def rows(dom):
    """{parameter name: its row's cells}, from the grid of the per-tag page."""
    out = {}
    for r in dom.root.all("div", "r"):
        if "h" in r.attrs.get("class", "").split():
            continue
        cells = [c for c in r.children if c.tag == "span"]
        out[text_of(cells[0])] = (r, cells)
    return out


def bins_of(svg):
    """[(lo, hi, count)] from a histogram's title."""
    # Edges are float32 (bfloat16 grid) values printed to 9 digits: parsed back as float32, exactly.
    return [(np.float32(a), np.float32(b), int(c))
            for a, b, c in re.findall(r"\[\s*(\S+),\s*(\S+)\)\s+(\d+)", svg.title())]


def info_fields(text):
    return {line[:11].strip(): line[11:].strip() for line in text.splitlines() if line[:11].strip()}


def check_row(cells, info, w, m, v, eps):
    """One row against info's text and a float64 numpy computation from independent arrays."""
    # Cells whose title holds a statistic as info prints it: norm, min, max, mean, std, then the
    # median update (its title also gives its bucket), the update max and the mean exp_avg_sq.
    stats = [c for c in cells if c.attrs.get("title", "").strip()]
    keys = ["norm", "min", "max", "mean", "std", "median", "update max", "moment mean"]
    titled = {k: float(c.attrs["title"].split()[-1]) for k, c in zip(keys, stats)}
    for key, field in [("norm", "L2 norm"), ("min", "min"), ("max", "max"), ("mean", "mean"), ("std", "std")]:
        got = stats[keys.index(key)].attrs["title"].split()[-1]
        assert got == info[field], (key, got, info[field])  # as info prints it, character for character
    counts = [c for c in cells if "v" in c.attrs.get("class", "").split() and text_of(c).strip().isdigit()]
    nan, inf = (int(text_of(c)) for c in counts[-2:])
    assert (nan, inf) == (int(info["NaN"].replace(",", "")), int(info["inf"].replace(",", "")))
    w64 = w.astype(np.float64).ravel()
    fin = w64[np.isfinite(w64)]
    fin32 = fin.astype(np.float32)  # what the histograms count: the stored values, against float32 edges
    assert nan == int(np.isnan(w64).sum()) and inf == int(np.isinf(w64).sum())
    if fin.size:
        assert titled["norm"] == pytest.approx(np.linalg.norm(fin), rel=1e-7)
        assert titled["min"] == pytest.approx(fin.min(), rel=1e-7) and titled["max"] == pytest.approx(fin.max(), rel=1e-7)
        assert titled["mean"] == pytest.approx(fin.mean(), rel=1e-6, abs=1e-9)
        assert titled["std"] == pytest.approx(fin.std(), rel=1e-6, abs=1e-9)
    svgs = [s for c in cells for s in c.all("svg")]
    assert len(svgs) == (2 if m is not None else 1), "a histogram of the weights, and of exp_avg_sq"
    wb = bins_of(svgs[0])
    assert sum(c for _, _, c in wb) == fin.size, "every finite weight is counted"
    for lo, hi, c in wb:  # exact for the edges shown: np counts the same values
        assert c == int(((fin32 >= lo) & (fin32 < hi)).sum()), (lo, hi, c)
    if m is None:
        return
    u = np.abs(m.astype(np.float64).ravel()) / (np.sqrt(v.astype(np.float64).ravel()) + eps)
    ufin = np.sort(u[np.isfinite(u)])
    lo, hi = (np.float32(x) for x in re.search(r"\[\s*(\S+),\s*(\S+)\)", stats[5].attrs["title"]).groups())
    vfin = v.astype(np.float64).ravel()
    vfin = vfin[np.isfinite(vfin)]
    if ufin.size:
        middle = ufin[(ufin.size - 1) // 2]
        assert lo <= np.float32(middle) < hi, (lo, middle, hi)
        assert np.float32(titled["median"]) == np.float32(lo), "printed to 9 digits, as info prints"
        assert titled["update max"] == pytest.approx(ufin.max(), rel=1e-8), "the same arithmetic, printed to 9 digits"
    if vfin.size:
        assert titled["moment mean"] == pytest.approx(vfin.mean(), rel=1e-6)
    assert sum(c for _, _, c in bins_of(svgs[1])) == vfin.size
    v32 = vfin.astype(np.float32)
    for lo, hi, c in bins_of(svgs[1]):
        assert c == int(((v32 >= lo) & (v32 < hi)).sum()), (lo, hi, c)


def test_tag_page_has_every_parameter_with_the_numbers_of_info_and_numpy(mnt):
    name, m = mnt
    page = f"{m}/{TAG}_params/report.html"
    size = os.stat(page).st_size
    dom = Dom(chromium("file://" + page, shot=f"tag-{name}.png"))
    with open(page, "rb") as f:
        assert len(f.read()) == size, "stat knew the size before anything was read"
    params = sorted(p for p in os.listdir(f"{m}/{TAG}_params") if os.path.isdir(f"{m}/{TAG}_params/{p}"))
    got = rows(dom)
    assert sorted(got) == params, "one row per parameter"
    state = live_state(name)
    for p in params:
        _, cells = got[p]
        with open(f"{m}/{TAG}_params/{p}/info") as f:
            info = info_fields(f.read())
        check_row(cells, info, state["fp32"][p].numpy(), state["exp_avg"][p].numpy(), state["exp_avg_sq"][p].numpy(),
                  1e-8)  # every fixture trains torch's AdamW with its default eps
    run = text_of(next(dom.root.all("table", "kv")))
    assert "ZeRO-" in run or "BF16_Optimizer" in run
    assert re.search(r"step\s+3(?!\d)", run), run
    bars = [r for svg in dom.root.all("figure") for r in svg.all("rect")]
    assert len(bars) == 2 * 5, "a bar per layer (embed fc1 norm fc2 head) in both charts"


def browser_order(page, fragment, tmp_path):
    """The parameters as the browser lays them out, top to bottom, with `#fragment` in the URL: a
    wrapper page reads the report's layout (its own script; the report has none)."""
    wrap = tmp_path / "wrap.html"
    wrap.write_text(f"""<!DOCTYPE html><html><body><pre id="out">waiting</pre>
<iframe id="f" width="1500" height="1000" src="file://{page}#{fragment}"></iframe><script>
document.getElementById('f').onload = function () {{
  const rows = [...this.contentDocument.querySelectorAll('span.n')].map(e => [e.getBoundingClientRect().top, e.textContent]);
  rows.sort((a, b) => a[0] - b[0]);
  document.getElementById('out').textContent = JSON.stringify(rows.map(x => x[1]));
}};</script></body></html>""")
    dom = Dom(chromium(f"file://{wrap}", "--allow-file-access-from-files", "--virtual-time-budget=10000"))
    return json.loads(next(n for n in dom.root.all("pre")).text)


def test_sorting_by_a_column_works_in_the_browser_without_a_script(tmp_path):
    with mount(os.path.join(FIXTURES, "z3_ws2_fp32_pg2_sg200", "checkpoint")) as m:
        page = f"{m}/{TAG}_params/report.html"
        raw = open(page).read()
        assert "<script" not in raw.lower()
        state = live_state("z3_ws2_fp32_pg2_sg200")
        norms = {p: float(np.linalg.norm(w.double().numpy())) for p, w in state["fp32"].items()}
        maxima = {p: float(w.max()) for p, w in state["fp32"].items()}
        by_norm = sorted(norms, key=lambda p: -norms[p])
        assert browser_order(page, "s1d", tmp_path) == by_norm, "norm, largest first"
        assert browser_order(page, "s1a", tmp_path) == by_norm[::-1], "norm, smallest first"
        assert browser_order(page, "s3d", tmp_path) == sorted(maxima, key=lambda p: -maxima[p]), "max, largest first"
        chromium(f"file://{page}#s1d", shot="tag-sorted-by-norm.png")


def requests_of_the_page(url, tmp_path):
    """URLs the page asked the network for (chromium's net log: requests whose top frame is a
    file:// page); every host name resolves to nothing, so nothing leaves the machine anyway."""
    log = tmp_path / f"net-{time.monotonic_ns()}.json"
    chromium(url, '--host-resolver-rules=MAP * ~NOTFOUND', f"--log-net-log={log}", "--net-log-capture-mode=Everything")
    d = json.load(open(log))
    types = {v: k for k, v in d["constants"]["logEventTypes"].items()}
    return [e["params"]["url"] for e in d["events"]
            if types[e["type"]] == "URL_REQUEST_START_JOB" and "url" in e.get("params", {})
            and "file://" in e["params"].get("network_isolation_key", "")]


def test_the_pages_ask_the_network_for_nothing(tmp_path):
    control = tmp_path / "control.html"  # the check can fail: a page that fetches is seen fetching
    control.write_text('<!DOCTYPE html><img src="http://zm-test.invalid/x.png"><link rel="stylesheet" '
                       'href="https://zm-test.invalid/a.css">')
    assert len(requests_of_the_page(f"file://{control}", tmp_path)) >= 2
    with mount(os.path.join(FIXTURES, "z2_ws2_fp16_pg2", "checkpoint")) as m:
        for page in (f"{m}/{TAG}_params/report.html", f"{m}/report.html"):
            assert requests_of_the_page(f"file://{page}", tmp_path) == [], page
            raw = open(page).read()
            # Nothing that names another resource: links are anchors of the page itself.
            assert not re.search(r"(?i)<(script|img|link|iframe|object|embed)\b|\bsrc=|url\(|@import|https?:", raw)
            assert set(re.findall(r'href="([^"#]*)', raw)) <= {""}, "every href is '#...'"


def gen(out, *args):
    subprocess.run(["/usr/bin/python3", GEN, str(out), *map(str, args)], check=True, capture_output=True)


def layer_of(name):
    parts = name.split(".")
    for k, x in enumerate(parts):
        if x.isdigit():
            return ".".join(parts[:k + 1])
    return ".".join(parts[:-1]) or name


def points(dom, metric):
    """{layer: [(tag, value)]} of one column of the page across tags."""
    out = {}
    for r in dom.root.all("div", "r"):
        if "h" in r.attrs.get("class", "").split():
            continue
        cells = [c for c in r.children if c.tag == "span"]
        svg = next(cells[1 + metric].all("svg"))
        pts = []
        for c in svg.all("circle"):
            tag, value = re.match(r"(\S+) \(step\s+\S+\):\s+(\S+)", c.title()).groups()
            pts.append((tag, float(value)))
        out[text_of(cells[0])] = pts
    return out


def expected_run(expected_dirs):
    """Per layer and tag: norm, mean update, mean exp_avg_sq, relative change: numpy, float64."""
    out = {}
    prev = None
    for d in expected_dirs:
        man = json.load(open(os.path.join(d, "manifest.json")))
        layers = {}
        for p in man["params"]:
            a = {s: np.load(os.path.join(d, p["name"], s + ".npy")).astype(np.float64).ravel()
                 for s in ("fp32", "exp_avg", "exp_avg_sq")}
            layers.setdefault(layer_of(p["name"]), []).append((p["name"], a))
        for layer, ps in layers.items():
            w = np.concatenate([a["fp32"] for _, a in ps])
            u = np.concatenate([np.abs(a["exp_avg"]) / (np.sqrt(a["exp_avg_sq"]) + 1e-8) for _, a in ps])
            v = np.concatenate([a["exp_avg_sq"] for _, a in ps])
            change = None
            if prev is not None:
                before = np.concatenate([prev[n]["fp32"] for n, _ in ps])
                change = np.linalg.norm(w - before) / np.linalg.norm(before)
            out.setdefault(layer, []).append((np.linalg.norm(w), u.mean(), v.mean(), change))
        prev = {n: a for ps in layers.values() for n, a in ps}
    return out


def test_the_page_across_tags_follows_the_tags_in_training_order(tmp_path):
    src, truth = tmp_path / "ckpt", []
    for step, seed in [(20, 3), (5, 2), (100, 4)]:  # saved out of order: training order is by step
        truth.append((step, tmp_path / f"expected{step}"))
        gen(src, "--stage", 2, "--dp", 2, "--sizes", "37x12,30,20x20,7,5x5,3", "--seed", seed, "--steps", step,
            "--expected", truth[-1][1])
    truth.sort()
    with mount(str(src)) as m:
        page = f"{m}/report.html"
        size = os.stat(page).st_size
        dom = Dom(chromium("file://" + page, shot="run-synthetic.png", size="1300,800"))
        with open(page, "rb") as f:
            assert len(f.read()) == size
        want = expected_run([d for _, d in truth])
        for metric in range(4):
            got = points(dom, metric)
            assert set(got) == set(want)
            for layer, pts in got.items():
                assert [t for t, _ in pts] == [f"global_step{s}" for s, _ in truth], "training order"
                for (tag, value), w in zip(pts, want[layer]):
                    if w[metric] is None:
                        assert math.isnan(value), (layer, tag)
                    else:
                        assert value == pytest.approx(w[metric], rel=1e-8), (layer, tag, metric)  # 9 digits
        # A tag saved after the mount joins the page; a deleted one leaves it.
        gen(tmp_path / "later", "--stage", 2, "--dp", 2, "--sizes", "37x12,30,20x20,7,5x5,3", "--seed", 9,
            "--steps", 200)
        os.rename(tmp_path / "later" / "global_step200", src / "global_step200")
        deadline = time.time() + 10
        while "global_step200" not in open(page).read() and time.time() < deadline:
            time.sleep(0.3)
        assert "global_step200" in open(page).read()
        shutil.rmtree(src / "global_step5")
        deadline = time.time() + 10
        while "global_step5 " in open(page).read() and time.time() < deadline:
            time.sleep(0.3)
        text = open(page).read()
        assert "global_step5 " not in text and "global_step20 " in text
        assert os.stat(page).st_size == len(text.encode())


def test_a_layer_the_tags_hold_otherwise_has_no_change_and_is_not_red(tmp_path):
    """layers.1 has a weight and a bias at step 1 and only its weight at step 2: its relative change
    is not a number to show (not drawn, not red: no value was not finite), and layers.0's is."""
    src, exp = tmp_path / "ckpt", tmp_path / "expected"
    gen(src, "--stage", 2, "--dp", 2, "--sizes", "37x12,30,20x20,7", "--seed", 1, "--steps", 1, "--expected", exp)
    gen(src, "--stage", 2, "--dp", 2, "--sizes", "37x12,30,20x20", "--seed", 2, "--steps", 2)
    with mount(str(src)) as m:
        page = f"{m}/report.html"
        dom = Dom(chromium("file://" + page))
        assert len(open(page, "rb").read()) == os.stat(page).st_size
        change = {}
        for r in dom.root.all("div", "r"):
            if "h" in r.attrs.get("class", "").split():
                continue
            cells = [c for c in r.children if c.tag == "span"]
            change[text_of(cells[0])] = [c.attrs["class"] for c in next(cells[4].all("svg")).all("circle")]
        assert change["layers.0"] == ["n", "g"], "the first tag has no change; layers.0 is compared"
        assert change["layers.1"] == ["n", "n"], "layers.1 is held otherwise: no value, not red"
        got = points(dom, 3)
        assert math.isnan(got["layers.1"][1][1]) and math.isfinite(got["layers.0"][1][1])


def test_a_trainer_output_dir_has_the_page_across_its_checkpoints():
    run = os.path.join(FIXTURES, "hf", "gpt2_z2", "run")
    with mount(run) as m:
        assert "report.html" in os.listdir(m)
        dom = Dom(chromium(f"file://{m}/report.html", shot="run-trainer.png", size="1300,700"))
        norm = points(dom, 0)
        tags = ["checkpoint-2/global_step2", "checkpoint-4/global_step4"]
        for layer, pts in norm.items():
            assert [t for t, _ in pts] == tags
            for tag, value in pts:
                ck, t = tag.split("/")
                d = f"{m}/{ck}/{t}_params"
                w = np.concatenate([np.load(f"{d}/{p}/fp32.npy").astype(np.float64).ravel()
                                    for p in os.listdir(d) if os.path.isdir(f"{d}/{p}") and layer_of(p) == layer])
                assert value == pytest.approx(np.linalg.norm(w), rel=1e-8), (layer, tag)
        # Step 2's weights are also in the live engine state of the run: an independent reader.
        state = torch.load(os.path.join(FIXTURES, "hf", "gpt2_z2", "meta", "live_state_step2.pt"), weights_only=False)
        fp32 = state["fp32"] if "fp32" in state else state
        wte = fp32["transformer.wte.weight"].double().numpy()
        assert norm["transformer.wte"][0][1] == pytest.approx(np.linalg.norm(wte), rel=1e-8)


def hostile(tmp_path):
    """A ZeRO-2 dp=1 run whose shards are patched: layers.0.weight all NaN, layers.2.weight with
    +inf and -inf, layers.0.bias's exp_avg_sq all inf; a single element and a zero-sized one."""
    src, exp = tmp_path / "hostile", tmp_path / "hostile-expected"
    gen(src, "--stage", 2, "--dp", 1, "--sizes", "37x12,30,1,0,20x20,7", "--expected", exp)
    shard = src / TAG / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    raw = bytearray(shard.read_bytes())
    arrays = {}

    def patch(name, state, new):
        old = np.load(exp / name / f"{state}.npy")
        at = raw.find(old.astype(np.float32).tobytes())
        assert at >= 0 and raw.find(old.astype(np.float32).tobytes(), at + 1) < 0, (name, state)
        raw[at:at + old.nbytes] = new.astype(np.float32).tobytes()
        arrays[(name, state)] = new

    w = np.load(exp / "layers.2.weight" / "fp32.npy")
    w.ravel()[[3, 7]] = [np.inf, -np.inf]
    patch("layers.0.weight", "fp32", np.full((37, 12), np.nan, np.float32))
    patch("layers.2.weight", "fp32", w)
    patch("layers.0.bias", "exp_avg_sq", np.full(30, np.inf, np.float32))
    shard.write_bytes(bytes(raw))
    state = lambda n, s: arrays.get((n, s), np.load(exp / n / f"{s}.npy"))  # noqa: E731
    return src, state


def test_hostile_values_are_counted_and_shown(tmp_path):
    src, state = hostile(tmp_path)
    with mount(str(src)) as m:
        page = f"{m}/{TAG}_params/report.html"
        size = os.stat(page).st_size
        dom = Dom(chromium("file://" + page, shot="tag-hostile.png"))
        assert len(open(page, "rb").read()) == size
        got = rows(dom)
        assert sorted(got) == sorted(["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                      "layers.2.weight", "layers.2.bias"])
        for p, (_, cells) in got.items():
            info = info_fields(open(f"{m}/{TAG}_params/{p}/info").read())
            check_row(cells, info, state(p, "fp32"), state(p, "exp_avg"), state(p, "exp_avg_sq"), 1e-8)
        red = lambda p: [text_of(c).strip() for c in got[p][1] if "b" in c.attrs.get("class", "").split()]  # noqa: E731
        assert red("layers.0.weight") == ["444"], "444 NaN, in red"
        assert red("layers.2.weight") == ["2"], "2 inf, in red"
        assert red("layers.1.weight") == [] and red("layers.1.bias") == []
        upd = [c for c in got["layers.0.bias"][1] if "median" in c.attrs.get("title", "")][0]
        assert float(upd.attrs["title"].split()[-1]) == 0.0, "|m| / (inf + eps) is 0"
        # The chart's axis labels come before its caption (main a5f7387): found by its caption.
        norms = next(f for f in dom.root.all("figure") if "Weight norm" in text_of(f))
        bars = {b.title().split(":")[0]: "b" in b.attrs.get("class", "").split() for b in norms.all("rect")}
        assert bars["layers.0"] and bars["layers.2"] and not bars["layers.1"], "layers with NaN or inf are red"


def test_a_llama_shaped_page_has_the_size_stat_gave(tmp_path):
    """gen_ckpt's Llama-style model lists lm_head before model.norm in its optimizer state but
    after it in its module: the page laid out at stat must name its layers in the same order as
    the page built from the shards (a page of a 70B run once failed with EIO after an hour)."""
    src = tmp_path / "llama"
    gen(src, "--stage", 3, "--dp", 8, "--arch", "small", "--sparse")
    with mount(str(src)) as m:
        for page in (f"{m}/{TAG}_params/report.html", f"{m}/report.html"):
            size = os.stat(page).st_size
            assert len(open(page, "rb").read()) == size, page


def test_sixteen_bit_masters(tmp_path):
    src, exp = tmp_path / "bf16", tmp_path / "bf16-expected"
    gen(src, "--stage", 1, "--dp", 2, "--sizes", "37x12,30,20x20,7", "--dtype", "bf16", "--module-dtype", "bf16",
        "--expected", exp)
    with mount(str(src)) as m:
        dom = Dom(chromium(f"file://{m}/{TAG}_params/report.html"))
        assert "bfloat16 master weights" in text_of(dom.root)
        for p, (_, cells) in rows(dom).items():
            info = info_fields(open(f"{m}/{TAG}_params/{p}/info").read())
            check_row(cells, info, *(np.load(exp / p / f"{s}.npy") for s in ("fp32", "exp_avg", "exp_avg_sq")), 1e-8)


def test_a_changed_shard_makes_the_pages_stale(tmp_copy):
    d = tmp_copy("z2_ws2_fp32_pg2")
    with mount(d) as m:
        page, across = f"{m}/{TAG}_params/report.html", f"{m}/report.html"
        before = open(page, "rb").read()
        open(across, "rb").read()
        with open(f"{d}/{TAG}/zero_pp_rank_1_mp_rank_00_optim_states.pt", "r+b") as f:
            f.write(b"\0" * 64)
        time.sleep(0.15)  # the path is re-checked at most every 100 ms
        for p in (across, page):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # past the page cache, to the daemon
                with pytest.raises(OSError) as e:
                    os.pread(fd, len(before), 0)
                assert e.value.errno == errno.ESTALE, p
            finally:
                os.close(fd)


def test_report_off_makes_no_report_files():
    with mount(os.path.join(FIXTURES, "z2_ws2_fp32_pg2", "checkpoint"), "-o", "report=off") as m:
        assert "report.html" not in os.listdir(m)
        assert "report.html" not in os.listdir(f"{m}/{TAG}_params")
        assert "a page to look at" not in open(f"{m}/{TAG}_params/README").read()
    with mount(os.path.join(FIXTURES, "hf", "gpt2_z2", "run"), "-o", "report=off") as m:
        assert sorted(os.listdir(m)) == [".zeromount", "checkpoint-2", "checkpoint-4"], "no run folder page"


def test_inspect_html_writes_the_pages_a_mount_shows(tmp_path):
    src = os.path.join(FIXTURES, "z3_ws2_bf16_pg2", "checkpoint")
    run = os.path.join(FIXTURES, "hf", "gpt2_z2", "run")
    with mount(src) as m, mount(run) as r:
        for ckpt, tag, want in [(src, TAG, f"{m}/{TAG}_params/report.html"), (src, None, f"{m}/report.html"),
                                (run, None, f"{r}/report.html"),
                                (run, "checkpoint-4/global_step4", f"{r}/checkpoint-4/global_step4_params/report.html")]:
            out = tmp_path / "page.html"
            cmd = [ZEROMOUNT, "inspect", ckpt, "--html", str(out)] + (["--tag", tag] if tag else [])
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            ours, theirs = out.read_text(), open(want).read()
            # The same page; only the pass's measured time may differ.
            strip = lambda s: re.sub(r"read in <span class=\"v\">[^<]*</span>", "", s)  # noqa: E731
            assert strip(ours) == strip(theirs), (ckpt, tag)
    r = subprocess.run([ZEROMOUNT, "inspect", src, "--html", str(tmp_path / "x.html"), "--json"], capture_output=True)
    assert r.returncode == 2
