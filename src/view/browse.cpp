#include "zeromount/view/browse.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "zeromount/ds/inspect.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"
#include "zeromount/view/universal.h"

namespace zm::view {

using ds::human_bytes;
using ds::shape_text;
using ds::with_commas;

namespace {

std::string pad(std::string s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}
std::string lpad(std::string s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

std::string group_text(const ds::Param& p) {
  return std::to_string(p.group) + (p.sub_group >= 0 ? " (sub-group " + std::to_string(p.sub_group) + ")" : "");
}

std::string file_name(const std::string& path) {
  return path.substr(path.find_last_of('/') + 1);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0)
      bits = sign;
    else {  // subnormal
      float f = std::ldexp(float(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000 | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

double element(const char* p, pt::DType d) {
  switch (d) {
    case pt::DType::F32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case pt::DType::F64: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    case pt::DType::BF16: {
      uint32_t b = uint32_t(uint16_t(p[0] & 0xFF) | uint16_t(p[1] & 0xFF) << 8) << 16;
      float v;
      memcpy(&v, &b, 4);
      return v;
    }
    case pt::DType::F16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return half_to_float(h);
    }
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

struct Stats {
  double min = INFINITY, max = -INFINITY, mean = 0, m2 = 0, sumsq = 0;
  uint64_t n = 0;
  void add(double x) {  // Welford: a stable variance over billions of elements
    ++n;
    const double d = x - mean;
    mean += d / double(n);
    m2 += d * (x - mean);
    sumsq += x * x;
    min = std::min(min, x);
    max = std::max(max, x);
  }
};

Stats compute_stats(const MountedTag& t, const ds::Param& p, const pt::ExtentReader& src) {
  Stats s;
  const size_t es = pt::element_size(t.index->master_dtype);
  std::string buf;
  pt::VirtualFile bytes;  // a parallel parameter's merge may be computed (averaged): read it as a file
  append_param_bytes(bytes, t, p, 0);
  for (uint64_t at = 0; at < bytes.size();) {
    const size_t n = size_t(std::min<uint64_t>(bytes.size() - at, (1u << 20) / es * es));
    buf.resize(n);
    bytes.read(at, buf.data(), n, src);
    for (size_t k = 0; k < n; k += es) s.add(element(buf.data() + k, t.index->master_dtype));
    at += n;
  }
  return s;
}

// Fixed width, so that the file's size does not depend on the values.
std::string num(double v) {
  char b[32];
  snprintf(b, sizeof b, "%16.8e", v);
  return b;
}

}  // namespace

std::string params_readme(const std::string& tag) {
  return "This folder is made up by zeromount from the shards of " + tag +
         "; nothing here is stored.\n\n"
         "summary              one row per trainable parameter: name, shape, dtype, numel, group, bytes\n"
         "<param>/info         shape, group, which dp ranks hold which elements, fp32 statistics\n"
         "                     (computed when you read it, then cached)\n"
         "<param>/<state>.npy  one optimizer state as a numpy array: np.load(path, mmap_mode='r')\n\n"
         "Folder names are parameter names; '%' and '/' are written %25 and %2F, \".\" and \"..\" as %2E and\n"
         "%2E%2E, and a name over 255 bytes is cut and ends in %~<hash> (its info holds the whole name).\n"
         "The consolidated fp32 weights, as zero_to_fp32.py writes them, are in ../" +
         tag +
         "_fp32/model.safetensors.\n"
         "DeepSpeed's loaders read ../" +
         tag + "_universal/, which this folder does not change.\n";
}

std::string params_summary(const ds::TagIndex& ix) {
  const std::string dt(pt::dtype_name(ix.master_dtype));
  const size_t es = pt::element_size(ix.master_dtype);
  size_t wn = 4, ws = 5, wc = 5;
  uint64_t total = 0;
  for (const auto& p : ix.params) {
    wn = std::max(wn, p.name.size());
    ws = std::max(ws, shape_text(p.shape).size());
    total += p.numel;
  }
  wc = std::max(wc, with_commas(total).size());
  std::string o = pad("name", wn + 2) + pad("shape", ws + 2) + pad("dtype", dt.size() + 2) + lpad("numel", wc) + "  " +
                  pad("group", 6) + lpad("bytes", 10) + "\n";
  for (const auto& p : ix.params)
    o += pad(p.name, wn + 2) + pad(shape_text(p.shape), ws + 2) + pad(dt, dt.size() + 2) +
         lpad(with_commas(p.numel), wc) + "  " + pad(std::to_string(p.group), 6) + lpad(human_bytes(p.numel * es), 10) +
         "\n";
  o += "\n" + pad("total: " + with_commas(ix.params.size()) + " parameters", wn + ws + dt.size() + 6) +
       lpad(with_commas(total), wc) + "  " + pad("", 6) + lpad(human_bytes(total * es), 10) + "\n";
  return o;
}

std::string param_info(const MountedTag& t, const ds::Param& p, const pt::ExtentReader* src) {
  const ds::TagIndex& ix = *t.index;
  std::string o;
  auto line = [&](const std::string& k, const std::string& v) { o += pad(k, 11) + v + "\n"; };
  line("name", p.name);
  line("shape", shape_text(p.shape));
  line("dtype", std::string(pt::dtype_name(ix.master_dtype)) + " (master weights and optimizer states)");
  if (ix.master_dtype != pt::DType::F32)
    line("note", "the source holds " + std::string(pt::dtype_name(ix.master_dtype)) +
                     " master weights where fp32 is usual; they are served as stored, never converted");
  line("numel", with_commas(p.numel));
  line("group", group_text(p));
  line("states", [&] {
    std::string s;
    for (size_t k = 0; k < ix.state_names.size(); ++k) s += (k ? ", " : "") + ix.state_names[k];
    return s;
  }());
  std::string part = "ZeRO-" + std::to_string(ix.stage) + " over " + std::to_string(ix.dp) + " dp ranks";
  if (ix.stage == 3) part += ", ceil(" + with_commas(p.numel) + "/" + std::to_string(ix.dp) + ") per rank";
  line("partition", part);
  // A parallel parameter is a merge of tensor-parallel slices: its rule says where it comes from.
  if (ix.parallel())
    line("merge", std::string(ds::tp_rule_name(p.rule)) + (p.vocab ? ", vocabulary" : "") + " over tp " +
                      std::to_string(ix.tp) + " x pp " + std::to_string(ix.pp));
  const auto frags = ix.parallel() ? std::vector<ds::Fragment>{} : ix.fragments(p, 0);
  for (size_t k = 0; k < frags.size(); ++k) {
    const ds::Fragment& f = frags[k];
    line(k ? "" : "ranks", "rank " + std::to_string(f.rank) + ": elements [" + with_commas(f.start) + ", " +
                               with_commas(f.start + f.numel) + ") in " + file_name(ix.shards.at(f.extent.file).path));
  }
  if (src) {
    const Stats s = compute_stats(t, p, *src);
    const double n = s.n ? double(s.n) : NAN;
    line("min", num(s.n ? s.min : NAN));
    line("max", num(s.n ? s.max : NAN));
    line("mean", num(s.n ? s.mean : NAN));
    line("std", num(std::sqrt(s.m2 / n)));
    line("L2 norm", num(std::sqrt(s.sumsq)));
  } else {
    for (const char* k : {"min", "max", "mean", "std", "L2 norm"}) line(k, num(0));
  }
  return o;
}

pt::VirtualFile param_npy(const MountedTag& t, const ds::Param& p, size_t state) {
  std::string shape = "(";
  for (size_t k = 0; k < p.shape.size(); ++k)
    shape += std::to_string(p.shape[k]) + (p.shape.size() == 1 || k + 1 < p.shape.size() ? ", " : "");
  if (p.shape.size() == 1) shape.pop_back();
  shape += ")";
  std::string header = "{'descr': '" + std::string(pt::numpy_descr(t.index->master_dtype)) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes and ending in \n.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string pre = "\x93NUMPY";
  pre += '\x01';
  pre += '\x00';
  pre += char(header.size() & 0xFF);
  pre += char(header.size() >> 8);
  pt::VirtualFile f;
  f.append_inline(pre + header);
  append_param_bytes(f, t, p, state);
  return f;
}

pt::VirtualFile model_safetensors(const MountedTag& t) {
  const ds::TagIndex& ix = *t.index;
  // Two passes over small records (the header, then the data extents), so that the only large
  // thing built is the VirtualFile itself: one segment per (parameter, rank) piece.
  struct Item {
    const std::string* name;
    pt::DType dtype;
    const std::vector<int64_t>* shape;
    uint64_t bytes;
    const ds::Param* param;
    const ds::PlainTensor* plain;
  };
  std::vector<Item> items;
  const size_t es = pt::element_size(ix.master_dtype);
  for (const auto& p : ix.params) items.push_back({&p.name, ix.master_dtype, &p.shape, p.numel * es, &p, nullptr});
  for (const auto* list : {&ix.frozen, &ix.buffers})
    for (const auto& f : *list)
      items.push_back({&f.name, f.dtype, &f.shape, f.numel() * pt::element_size(f.dtype), nullptr, &f});
  const size_t own = items.size();
  for (const auto& [alias, canon] : ix.shared)
    for (size_t k = 0; k < own; ++k)
      if (*items[k].name == canon) {
        Item copy = items[k];
        copy.name = &alias;
        items.push_back(copy);
        break;
      }
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t at = 0;
  for (const auto& e : items) {
    header += "," + pt::json_escape(*e.name) + ":{\"dtype\":\"" + std::string(pt::safetensors_name(e.dtype)) +
              "\",\"shape\":" + shape_text(*e.shape) + ",\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + e.bytes) + "]}";
    at += e.bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // tensors start 8-byte aligned
  std::string len(8, '\0');
  for (int k = 0; k < 8; ++k) len[size_t(k)] = char(uint64_t(header.size()) >> (8 * k));
  pt::VirtualFile f;
  size_t pieces = 1;
  for (const auto& e : items)
    pieces += e.param ? (ix.parallel() ? 1 : ix.fragments(*e.param, 0).size()) : e.plain->data.size();
  f.reserve(pieces);
  f.append_inline(len + header);
  for (const auto& e : items) {
    uint64_t left = e.bytes;  // frozen ZeRO-3 partitions end in padding: cut to the tensor's size
    auto add = [&](pt::Extent x) {
      x.length = std::min(x.length, left);
      left -= x.length;
      f.append_extent(t.map(x));
    };
    if (e.param)
      append_param_bytes(f, t, *e.param, 0);
    else
      for (const auto& x : e.plain->data) add(x);
  }
  return f;
}

}  // namespace zm::view
