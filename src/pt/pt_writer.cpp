#include "zeromount/pt/pt_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "zeromount/pt/crc32.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/file.h"
#include "zeromount/pt/pickle_writer.h"
#include "zeromount/pt/virtual_file.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::pt {
namespace {

constexpr uint64_t kBig = 0xFFFFFFFFu;
constexpr uint64_t kAlign = 64;

struct Bytes {
  std::string s;
  void le(uint64_t v, int n) {
    char b[8];
    for (int k = 0; k < n; ++k) b[k] = char(v >> (8 * k));
    s.append(b, size_t(n));
  }
  void u16(uint64_t v) { le(v, 2); }
  void u32(uint64_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
};

struct Record {
  std::string name;
  std::string inline_data;               // small records
  const VirtualFile* storage = nullptr;  // storage records (null: an empty one)
  uint64_t sized = 0;                    // a record of this many bytes whose content is not laid out (pt_size)
  uint64_t size() const { return storage ? storage->size() : sized ? sized : inline_data.size(); }
};

uint32_t record_crc(const Record& r, const ExtentReader* src) {
  if (!src || r.size() == 0) return 0;
  if (!r.storage) return crc32(r.inline_data.data(), r.inline_data.size());
  uint32_t crc = 0;
  std::string buf(1 << 20, '\0');
  for (uint64_t at = 0; at < r.storage->size();) {
    const size_t n = r.storage->read(at, buf.data(), buf.size(), *src);
    crc = crc32(buf.data(), n, crc);
    at += n;
  }
  return crc;
}

// The records of a .pt file in torch.save's order: the pickle, byteorder, each storage, version.
// `storage(k)` makes storage key k's record.
template <class Storage>
std::vector<Record> records(std::string pickle, uint64_t pickle_bytes, size_t storages, const PtOptions& opts,
                            Storage storage) {
  std::vector<Record> recs;
  recs.push_back({opts.prefix + "/data.pkl", std::move(pickle), nullptr, pickle_bytes});
  if (opts.byteorder) recs.push_back({opts.prefix + "/byteorder", "little", nullptr});
  std::vector<size_t> order(storages);
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  if (opts.legacy_key_order)
    std::sort(order.begin(), order.end(), [](size_t a, size_t b) { return std::to_string(a) < std::to_string(b); });
  for (size_t k : order) recs.push_back(storage(k, opts.prefix + "/data/" + std::to_string(k)));
  recs.push_back({opts.prefix + "/version", "3\n", nullptr});
  return recs;
}

// Lays the records out as torch.save does into `vf`; with no `vf`, only counts the bytes.
uint64_t lay_out(const std::vector<Record>& recs, const PtOptions& opts, VirtualFile* vf) {
  Bytes cd;
  uint64_t pos = 0;
  for (const Record& r : recs) {
    const uint64_t size = r.size();
    const bool z64 = size >= kBig || pos >= kBig;
    Bytes lx, cx;
    if (z64) {
      Bytes lb, cb;
      if (size >= kBig) {
        lb.u64(size);
        lb.u64(0);
        cb.u64(size);
        cb.u64(size);
      }
      if (pos >= kBig) {
        lb.u64(pos);
        cb.u64(pos);
      }
      lx.u16(1);
      lx.u16(lb.s.size());
      lx.s += lb.s;
      cx.u16(1);
      cx.u16(cb.s.size());
      cx.s += cb.s;
    }
    // The "FB" extra pads the local header so that the data starts on a 64-byte boundary.
    const uint64_t start = pos + 30 + r.name.size() + lx.s.size() + 4;
    const uint64_t pad = (kAlign - start % kAlign) % kAlign;
    lx.s += "FB";
    lx.u16(pad);
    lx.s.append(pad, 'Z');
    const uint16_t flags = size ? 0x0808 : 0x0800;
    const uint32_t crc = vf ? record_crc(r, opts.crc_source) : 0;  // a CRC changes bytes, never sizes

    Bytes h;
    h.u32(0x04034b50);
    h.u16(0);
    h.u16(flags);
    h.u16(0);
    h.u16(0);
    h.u16(0);
    h.u32(0);
    h.u32(0);
    h.u32(0);
    h.u16(r.name.size());
    h.u16(lx.s.size());
    h.s += r.name;
    h.s += lx.s;
    if (vf) {
      vf->append_inline(h.s);
      if (r.storage)
        vf->append(*r.storage);
      else
        vf->append_inline(r.inline_data);
    }
    uint64_t end_of_record = pos + h.s.size() + size;
    if (size) {
      Bytes dd;
      dd.u32(0x08074b50);
      dd.u32(crc);
      if (z64) {
        dd.u64(size);
        dd.u64(size);
      } else {
        dd.u32(size);
        dd.u32(size);
      }
      if (vf) vf->append_inline(dd.s);
      end_of_record += dd.s.size();
    }
    cd.u32(0x02014b50);
    cd.u16(0);
    cd.u16(0);
    cd.u16(flags);
    cd.u16(0);
    cd.u16(0);
    cd.u16(0);
    cd.u32(crc);
    cd.u32(std::min(size, kBig));
    cd.u32(std::min(size, kBig));
    cd.u16(r.name.size());
    cd.u16(cx.s.size());
    cd.u16(0);
    cd.u16(0);
    cd.u16(0);
    cd.u32(0);
    cd.u32(std::min(pos, kBig));
    cd.s += r.name;
    cd.s += cx.s;
    pos = end_of_record;
  }
  const uint64_t n = recs.size(), cd_ofs = pos, cd_size = cd.s.size();
  Bytes end;
  end.s = std::move(cd.s);
  const uint64_t z64_ofs = cd_ofs + cd_size;
  end.u32(0x06064b50);
  end.u64(44);
  end.u16(0x031E);
  end.u16(0x002D);
  end.u32(0);
  end.u32(0);
  end.u64(n);
  end.u64(n);
  end.u64(cd_size);
  end.u64(cd_ofs);
  end.u32(0x07064b50);
  end.u32(0);
  end.u64(z64_ofs);
  end.u32(1);
  end.u32(0x06054b50);
  end.u16(0);
  end.u16(0);
  end.u16(std::min<uint64_t>(n, 0xFFFF));
  end.u16(std::min<uint64_t>(n, 0xFFFF));
  end.u32(std::min(cd_size, kBig));
  end.u32(std::min(cd_ofs, kBig));
  end.u16(0);
  if (vf) vf->append_inline(end.s);
  return pos + end.s.size();
}

}  // namespace

VirtualFile build_pt(const Node* root, const PtOptions& opts) {
  PickledTensors p = pickle_value(root);
  const uint64_t pickle_bytes = p.pickle.size();
  const auto recs =
      records(std::move(p.pickle), pickle_bytes, p.storages.size(), opts, [&](size_t k, std::string name) {
        const Tensor* t = p.storages[k];
        const VirtualFile* bytes = t->made().bytes.get();
        const uint64_t have = bytes ? bytes->size() : 0;
        if (have != t->write_bytes())
          throw Error("pt writer: tensor needs " + std::to_string(t->write_bytes()) + " bytes, its storage holds " +
                      std::to_string(have));
        return Record{std::move(name), {}, bytes};
      });
  VirtualFile vf;
  lay_out(recs, opts, &vf);
  return vf;
}

PtRecords pt_records(const Node* root) {
  PickledTensors p = pickle_value(root);
  PtRecords r{p.pickle.size(), {}};
  for (const Tensor* t : p.storages) r.storages.push_back(t->write_bytes());
  return r;
}

uint64_t pt_size(const PtRecords& shape, const PtOptions& opts) {
  return lay_out(records({}, shape.pickle, shape.storages.size(), opts,
                         [&](size_t k, std::string name) {
                           return Record{std::move(name), {}, nullptr, shape.storages[k]};
                         }),
                 opts, nullptr);
}

void write_record_crcs(const std::string& path) {
  std::vector<ZipEntry> entries;
  std::vector<uint64_t> data_at;
  {
    File f(path);
    ZipReader zip(f);
    entries = zip.entries();
    for (const auto& e : entries) data_at.push_back(zip.data_offset(e));
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open to write CRCs: " + strerror(errno), errno);
  auto put = [&](uint64_t at, uint32_t v) {
    unsigned char b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    if (::pwrite(fd, b, 4, off_t(at)) != 4) throw Error(path + ": cannot write a CRC: " + strerror(errno), EIO);
  };
  try {
    std::string buf(1 << 20, '\0');
    for (size_t k = 0; k < entries.size(); ++k) {
      const ZipEntry& e = entries[k];
      uint32_t crc = 0;
      for (uint64_t at = 0; at < e.size;) {
        const size_t n = size_t(std::min<uint64_t>(buf.size(), e.size - at));
        if (::pread(fd, buf.data(), n, off_t(data_at[k] + at)) != ssize_t(n))
          throw Error(path + ": short read while computing CRCs", EIO);
        crc = crc32(buf.data(), n, crc);
        at += n;
      }
      put(e.central_header + 16, crc);
      if (e.size) put(data_at[k] + e.size + 4, crc);  // the data descriptor after the data: signature, then CRC
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace zm::pt
