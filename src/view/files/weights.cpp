#include "zeromount/view/files/weights.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>

#include "zeromount/ds/state_bytes.h"
#include "zeromount/pt/convert.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/text.h"

namespace zm::view {

namespace {

// One tensor of a safetensors file: its header entry, and how its bytes join the file.
struct Item {
  const std::string* name;
  size_t shares = SIZE_MAX;  // an alias: the position of the tensor whose bytes it repeats
  pt::DType dtype;
  const std::vector<int64_t>* shape;
  uint64_t bytes;
  size_t pieces;  // the segments it adds to the file, unless `ranked`
  std::function<void(pt::VirtualFile&)> append;
  // A master stored in rank partitions: its pieces are counted only when its file is built (the
  // plan is made for every tag when its folder is filled, and must not walk every rank).
  const ds::Param* ranked = nullptr;
  // A tensor of the saved layout: its name and shape are its own, not the index's.
  std::shared_ptr<const std::string> own_name;
  std::shared_ptr<const std::vector<int64_t>> own_shape;
};

// A tensor stored whole or as rank partitions; ZeRO-3 partitions end in padding, cut here.
Item plain_item(const MountedTag& t, const ds::PlainTensor& p) {
  const uint64_t bytes = p.numel() * pt::element_size(p.dtype);
  return {&p.name, SIZE_MAX, p.dtype, &p.shape, bytes, p.data.size(), [&t, &p, bytes](pt::VirtualFile& f) {
            uint64_t left = bytes;
            for (pt::Extent x : p.data) {
              x.length = std::min(x.length, left);
              left -= x.length;
              f.append_extent(t.map(x));
            }
          }};
}

std::vector<pt::Extent> master_extents(const MountedTag& t, const ds::Param& p) {
  std::vector<pt::Extent> out;
  for (const auto& fr : t.index->fragments(p, 0)) out.push_back(t.map(fr.extent));
  return out;
}

// A trainable parameter in `dtype`: the master as stored, the module weight the source saved
// (ZeRO-1/2, BF16_Optimizer), or the master rounded to nearest even as DeepSpeed makes it (ZeRO-3).
Item param_item(const MountedTag& t, const ds::Param& p, size_t k, pt::DType dtype) {
  const ds::TagIndex& ix = *t.index;
  const uint64_t bytes = p.numel * pt::element_size(dtype);
  if (dtype == ix.master_dtype)  // a parallel parameter's merge is one piece, maybe computed
    return {&p.name,
            SIZE_MAX,
            dtype,
            &p.shape,
            bytes,
            1,  // counted from its ranks instead when `ranked`
            [&t, &p](pt::VirtualFile& f) { ds::state_bytes(*t.index, p, 0, t.mapper(), f); },
            ix.parallel() ? nullptr : &p};
  if (k < ix.module_weights.size() && ix.module_weights[k].dtype == dtype) {
    Item it = plain_item(t, ix.module_weights[k]);
    it.name = &p.name;
    return it;
  }
  return {&p.name, SIZE_MAX, dtype, &p.shape, bytes, 1, [&t, &p, dtype](pt::VirtualFile& f) {
            f.append_computed(std::make_shared<pt::ConvertedExtents>(master_extents(t, p), t.index->master_dtype, dtype,
                                                                     p.numel, p.name + " (fp32 master)"));
          }};
}

// Every tensor in zero_to_fp32.py's order: buffers, frozen parameters, trainable parameters,
// then the aliases of shared (tied) parameters, which repeat their tensor's bytes under their own
// name (the Trainer's own model.safetensors keeps both names of a tie too).
std::vector<Item> weight_items(const MountedTag& t, Weights which) {
  const ds::TagIndex& ix = *t.index;
  const pt::DType dtype = which == Weights::Master ? ix.master_dtype : ix.module_dtype;
  std::vector<Item> items;
  for (const auto& b : ix.buffers) items.push_back(plain_item(t, b));
  // Frozen parameters keep their stored dtype. ZeRO-1 and BF16_Optimizer store them only in the
  // module (zero_to_fp32.py drops them); ZeRO-2/3 also in frozen_param_fragments.
  std::vector<std::string> seen;
  const auto& frozen = which == Weights::Training && ix.stage != 3 ? ix.module_frozen : ix.frozen;
  for (const auto& f : frozen) {
    items.push_back(plain_item(t, f));
    seen.push_back(f.name);
  }
  if (which == Weights::Master)
    for (const auto& f : ix.module_frozen)
      if (std::find(seen.begin(), seen.end(), f.name) == seen.end()) items.push_back(plain_item(t, f));
  for (size_t k = 0; k < ix.params.size(); ++k) items.push_back(param_item(t, ix.params[k], k, dtype));
  const size_t own = items.size();
  for (const auto& [alias, canon] : ix.shared)
    for (size_t k = 0; k < own; ++k)
      if (*items[k].name == canon) {
        Item copy = items[k];
        copy.name = &alias;
        copy.shares = k;
        items.push_back(copy);
        break;
      }
  return items;
}

// Bytes of a saved tensor that are no run of its run-time tensors (a transpose, a concatenation
// along an inner dimension): each element gathered from its views on read, consecutive source
// elements read together.
class GatheredView final : public pt::Computed {
 public:
  GatheredView(SavedTensor t, std::vector<pt::VirtualFile> sources, size_t elem)
      : t_(std::move(t)), src_(std::move(sources)), es_(elem) {
    n_ = 1;
    for (int64_t d : t_.shape) n_ *= uint64_t(d);
  }
  uint64_t size() const override { return n_ * es_; }
  size_t memory_bytes() const override {
    size_t b = sizeof(*this);
    for (const auto& s : src_) b += s.memory_bytes();
    return b;
  }
  void read(uint64_t offset, void* out, size_t n, const pt::ExtentReader& files) const override {
    auto* dst = static_cast<unsigned char*>(out);
    std::vector<unsigned char> elem(es_);
    uint64_t run_src = 0, run_len = 0;
    size_t run_part = 0;
    unsigned char* run_dst = dst;
    auto flush = [&] {
      if (run_len && src_[run_part].read(run_src, run_dst, run_len, files) != run_len)
        throw Error(t_.name + ": short read of its run-time tensor", EIO);
      run_len = 0;
    };
    for (uint64_t at = offset; at < offset + n;) {
      const uint64_t e = at / es_, skip = at % es_;
      auto [part, src] = source_of(e);
      const uint64_t take = std::min<uint64_t>(es_ - skip, offset + n - at);
      unsigned char* to = dst + (at - offset);
      if (skip || take < es_) {  // a part of one element: read it alone
        flush();
        if (src_[part].read(src * es_, elem.data(), es_, files) != es_) throw Error(t_.name + ": short read", EIO);
        std::memcpy(to, elem.data() + skip, take);
      } else if (run_len && part == run_part && src * es_ == run_src + run_len && to == run_dst + run_len) {
        run_len += es_;
      } else {
        flush();
        run_part = part, run_src = src * es_, run_dst = to, run_len = es_;
      }
      at += take;
    }
    flush();
  }

 private:
  // The part and the element of its run-time tensor that saved element `e` is.
  std::pair<size_t, uint64_t> source_of(uint64_t e) const {
    std::vector<int64_t> idx(t_.shape.size());
    for (size_t d = t_.shape.size(); d-- > 0;) {
      idx[d] = int64_t(e % uint64_t(t_.shape[d]));
      e /= uint64_t(t_.shape[d]);
    }
    size_t p = 0;
    if (!idx.empty())
      while (p + 1 < t_.parts.size() && idx[size_t(t_.cat_dim)] >= t_.parts[p].shape[size_t(t_.cat_dim)])
        idx[size_t(t_.cat_dim)] -= t_.parts[p++].shape[size_t(t_.cat_dim)];
    const TensorView& v = t_.parts[p];
    int64_t at = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) at += idx[d] * v.strides[d];
    return {p, uint64_t(at)};
  }
  SavedTensor t_;
  std::vector<pt::VirtualFile> src_;  // per part: its run-time tensor's bytes
  size_t es_;
  uint64_t n_ = 0;
};

// The run-time tensors renamed and cut as save_pretrained writes them (saved_layout.h). A view that
// is one run of its tensor (an expert, the gate or up half of one) becomes that byte range of the
// tensor's own pieces; anything else is gathered on read. An alias stays an alias when its saved
// tensor is its whole run-time tensor.
std::vector<Item> saved_items(std::vector<Item> runtime, const Conversion& c) {
  std::vector<RuntimeTensor> names;
  for (const Item& it : runtime) names.push_back({*it.name, *it.shape});
  std::vector<SavedTensor> saved = saved_layout(c, names);
  std::vector<size_t> whole_at(runtime.size(), SIZE_MAX);  // run-time position -> saved position
  std::vector<Item> out;
  for (SavedTensor& s : saved) {
    const Item& first = runtime[s.parts.at(0).tensor];
    const size_t es = pt::element_size(first.dtype);
    uint64_t numel = 1;
    for (int64_t d : s.shape) numel *= uint64_t(d);
    const bool whole =
        s.parts.size() == 1 && s.parts[0].offset == 0 && s.parts[0].contiguous() && numel * es == first.bytes;
    Item it;
    it.own_name = std::make_shared<const std::string>(s.name);
    it.own_shape = std::make_shared<const std::vector<int64_t>>(s.shape);
    it.name = it.own_name.get();
    it.shape = it.own_shape.get();
    it.dtype = first.dtype;
    it.bytes = numel * es;
    it.pieces = first.pieces * s.parts.size() + 1;
    if (whole) {
      whole_at[s.parts[0].tensor] = out.size();
      it.shares = first.shares;  // mapped to saved positions below
      it.append = first.append;
      it.ranked = first.ranked;
      it.pieces = first.pieces;
      out.push_back(std::move(it));
      continue;
    }
    std::vector<std::function<void(pt::VirtualFile&)>> sources;
    bool runs = s.cat_dim == 0 || s.parts.size() == 1;
    for (const TensorView& v : s.parts) {
      sources.push_back(runtime[v.tensor].append);
      runs = runs && v.contiguous();
    }
    if (runs) {
      it.append = [sources, s, es](pt::VirtualFile& f) {
        for (size_t k = 0; k < s.parts.size(); ++k) {
          pt::VirtualFile src;
          sources[k](src);
          f.append(src, uint64_t(s.parts[k].offset) * es, s.parts[k].numel() * es);
        }
      };
    } else {
      it.append = [sources, s, es](pt::VirtualFile& f) {
        std::vector<pt::VirtualFile> src(sources.size());
        for (size_t k = 0; k < sources.size(); ++k) sources[k](src[k]);
        f.append_computed(std::make_shared<GatheredView>(s, std::move(src), es));
      };
    }
    out.push_back(std::move(it));
  }
  for (Item& it : out)
    if (it.shares != SIZE_MAX) it.shares = whole_at[it.shares];  // SIZE_MAX: its tensor was cut, so is it
  return out;
}

std::vector<Item> items_for(const MountedTag& t, Weights which, const Conversion* saved) {
  std::vector<Item> items = weight_items(t, which);
  return saved && saved->saved() ? saved_items(std::move(items), *saved) : items;
}

}  // namespace

std::vector<WeightTensor> weight_tensors(const MountedTag& t, Weights which) {
  std::vector<WeightTensor> out;
  for (Item& it : weight_items(t, which))
    out.push_back({it.name, it.shares, it.dtype, it.shape, it.bytes, std::move(it.append)});
  return out;
}

WeightShards plan_weights(const MountedTag& t, Weights which, uint64_t max_bytes, const Conversion* saved) {
  const std::vector<Item> items = items_for(t, which, saved);
  WeightShards plan;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    plan.names.push_back(*items[k].name);
    if (items[k].shares != SIZE_MAX) continue;  // placed with its tensor below
    const uint64_t bytes = items[k].bytes;
    plan.total_size += bytes;
    if (bytes > max_bytes) {
      plan.tensors.push_back({k});
      continue;
    }
    if (current_bytes + bytes > max_bytes) {
      plan.tensors.push_back(std::move(current));
      current = {};
      current_bytes = 0;
    }
    current.push_back(k);
    current_bytes += bytes;
  }
  if (!current.empty() || plan.tensors.empty()) plan.tensors.push_back(std::move(current));
  for (size_t k = 0; k < items.size(); ++k)
    if (items[k].shares != SIZE_MAX)
      for (auto& shard : plan.tensors)
        if (std::find(shard.begin(), shard.end(), items[k].shares) != shard.end()) {
          shard.push_back(k);
          break;
        }
  const size_t n = plan.tensors.size();
  auto five = [](size_t v) {
    std::string s = std::to_string(v);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  for (size_t k = 0; k < n; ++k)
    plan.files.push_back(n == 1 ? "model.safetensors" : "model-" + five(k + 1) + "-of-" + five(n) + ".safetensors");
  return plan;
}

pt::VirtualFile weights_file(const MountedTag& t, Weights which, const std::vector<size_t>& tensors,
                             const Conversion* saved) {
  // Two passes over small records (the header, then the data extents), so that the only large
  // thing built is the VirtualFile itself: one segment per (parameter, rank) piece.
  const std::vector<Item> all = items_for(t, which, saved);
  std::vector<const Item*> items;
  for (size_t k : tensors) items.push_back(&all.at(k));
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t at = 0;
  for (const Item* e : items) {
    header += "," + pt::json_escape(*e->name) + ":{\"dtype\":\"" + std::string(pt::safetensors_name(e->dtype)) +
              "\",\"shape\":" + pt::shape_text(*e->shape) + ",\"data_offsets\":[" + std::to_string(at) + "," +
              std::to_string(at + e->bytes) + "]}";
    at += e->bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // tensors start 8-byte aligned
  std::string len(8, '\0');
  for (int k = 0; k < 8; ++k) len[size_t(k)] = char(uint64_t(header.size()) >> (8 * k));
  pt::VirtualFile f;
  size_t pieces = 1;
  for (const Item* e : items) pieces += e->ranked ? t.index->fragments(*e->ranked, 0).size() : e->pieces;
  f.reserve(pieces);
  f.append_inline(len + header);
  for (const Item* e : items) {
    const uint64_t before = f.size();
    e->append(f);
    if (f.size() - before != e->bytes)
      throw Error(*e->name + ": " + std::to_string(f.size() - before) + " bytes where its shape needs " +
                      std::to_string(e->bytes),
                  EIO);
  }
  return f;
}

std::string weights_index(const WeightShards& plan) {
  std::vector<std::pair<std::string, const std::string*>> map;
  for (size_t s = 0; s < plan.files.size(); ++s)
    for (size_t k : plan.tensors[s]) map.emplace_back(plan.names[k], &plan.files[s]);
  std::sort(map.begin(), map.end());
  std::string j =
      "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(plan.total_size) + "\n  },\n  \"weight_map\": {";
  for (size_t k = 0; k < map.size(); ++k)
    j += (k ? ",\n    " : "\n    ") + pt::json_escape(map[k].first) + ": " + pt::json_escape(*map[k].second);
  return j + (map.empty() ? "}\n}\n" : "\n  }\n}\n");
}

uint64_t parse_shard_size(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}};
  const auto bad = [&] {
    return Error("-o max_shard_size: '" + text +
                     "' is not a size (a number of bytes, or e.g. 5GB, 500MB: KB, MB, GB, "
                     "TB are powers of 1000, as huggingface_hub reads them)",
                 EINVAL);
  };
  std::string s = text;
  double mult = 1;
  if (s.size() > 2) {
    std::string unit = s.substr(s.size() - 2);
    std::transform(unit.begin(), unit.end(), unit.begin(), ::toupper);
    for (const auto& [u, m] : kUnits)
      if (unit == u) {
        mult = m;
        s.resize(s.size() - 2);
      }
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  if (used != s.size() || !(v * mult >= 1) || v * mult > 1e18) throw bad();
  return uint64_t(v * mult);
}

}  // namespace zm::view
