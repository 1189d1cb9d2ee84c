#include "zeromount/pt/zip_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "zeromount/pt/error.h"

namespace zm::pt {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEocdSig = 0x06054b50, kZip64EocdSig = 0x06064b50,
                   kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kBig32 = 0xFFFFFFFFu;

uint16_t u16(const unsigned char* p) {
  return uint16_t(p[0] | p[1] << 8);
}
uint32_t u32(const unsigned char* p) {
  return uint32_t(u16(p)) | uint32_t(u16(p + 2)) << 16;
}
uint64_t u64(const unsigned char* p) {
  return uint64_t(u32(p)) | uint64_t(u32(p + 4)) << 32;
}

// What a file that is not a zip archive most likely is, from its first bytes, so that the refusal
// says what the user passed rather than guessing one format.
std::string not_a_zip(const unsigned char* head, size_t n) {
  if (n >= 9 && head[8] == '{' && u64(head) > 1 && u64(head) < (uint64_t(1) << 32))  // 8-byte length, then JSON
    return "a safetensors file, not a torch.save (.pt) file";
  if (n >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) return "a numpy .npy file, not a torch.save (.pt) file";
  if (head[0] == 0x80)  // a pickle protocol opcode: torch.save before 1.6
    return "not a zip archive: legacy torch.save format is not supported (re-save with torch >= 1.6 zip "
           "serialization)";
  return "not a torch.save (.pt) file: not a zip archive";
}

}  // namespace

ZipReader::ZipReader(const File& file) : ZipReader(file, 0, file.size()) {}

void ZipReader::read_at(uint64_t ofs, void* buf, size_t n, const char* what) const {
  if (ofs > size_ || n > size_ - ofs)
    throw FormatError(where(file_.path(),
                            std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, archive has " +
                                std::to_string(size_),
                            (long long)(base_ + ofs)));
  file_.read_exact(base_ + ofs, buf, n, what);
}

ZipReader::ZipReader(const File& file, uint64_t base, uint64_t size) : file_(file), base_(base), size_(size) {
  const std::string& path = file.path();
  if (base > file.size() || size > file.size() - base)
    throw FormatError(where(path,
                            "archive of " + std::to_string(size) + " bytes runs past the end of the file (" +
                                std::to_string(file.size()) + " bytes)",
                            (long long)base));
  const uint64_t fsize = size;
  unsigned char head[9] = {};
  if (fsize < 4) throw FormatError(where(path, "too small to be a torch.save file"));
  const size_t n = size_t(std::min<uint64_t>(fsize, sizeof head));
  read_at(0, head, n, "magic");
  if (u32(head) != kLocalSig) throw FormatError(where(path, not_a_zip(head, n)));
  if (fsize < 22) throw FormatError(where(path, "too small for a zip end record"));

  // The EOCD is the last 22 bytes plus a comment of at most 64 KiB.
  const uint64_t tail_len = std::min<uint64_t>(fsize, 22 + 0xFFFF);
  std::string tail(tail_len, '\0');
  read_at(fsize - tail_len, tail.data(), tail_len, "zip tail");
  const auto* t = reinterpret_cast<const unsigned char*>(tail.data());
  int64_t eocd = -1;
  for (int64_t k = int64_t(tail_len) - 22; k >= 0; --k) {
    if (u32(t + k) == kEocdSig && uint64_t(k) + 22 + u16(t + k + 20) <= tail_len) {
      eocd = k;
      break;
    }
  }
  if (eocd < 0) throw FormatError(where(path, "no zip end-of-central-directory record (truncated?)"));
  const uint64_t eocd_ofs = fsize - tail_len + uint64_t(eocd);
  uint64_t count = u16(t + eocd + 10);
  uint64_t cd_size = u32(t + eocd + 12);
  uint64_t cd_ofs = u32(t + eocd + 16);

  if (eocd_ofs >= 20) {
    unsigned char loc[20];
    read_at(eocd_ofs - 20, loc, 20, "zip64 locator");
    if (u32(loc) == kZip64LocatorSig) {
      const uint64_t z64 = u64(loc + 8);
      unsigned char rec[56];
      read_at(z64, rec, 56, "zip64 end record");
      if (u32(rec) != kZip64EocdSig)
        throw FormatError(where(path, "bad zip64 end record signature", (long long)(base_ + z64)));
      count = u64(rec + 32);
      cd_size = u64(rec + 40);
      cd_ofs = u64(rec + 48);
    }
  }
  if (cd_ofs > fsize || cd_size > fsize - cd_ofs)
    throw FormatError(where(path, "central directory lies outside the file (truncated?)", (long long)(base_ + cd_ofs)));
  if (count == 0) throw FormatError(where(path, "zip archive has no entries"));
  if (count > cd_size / 46)
    throw FormatError(
        where(path, "zip entry count " + std::to_string(count) + " exceeds what the central directory can hold"));

  // Not zeroed first: a directory of 100,000 records is megabytes, read once per file opened.
  const auto cd = std::make_unique_for_overwrite<char[]>(size_t(cd_size));
  read_at(cd_ofs, cd.get(), size_t(cd_size), "central directory");
  const auto* c = reinterpret_cast<const unsigned char*>(cd.get());
  uint64_t pos = 0;
  entries_.reserve(count);
  for (uint64_t k = 0; k < count; ++k) {
    if (pos + 46 > cd_size || u32(c + pos) != kCentralSig)
      throw FormatError(
          where(path, "bad central directory entry " + std::to_string(k), (long long)(base_ + cd_ofs + pos)));
    ZipEntry e;
    e.central_header = cd_ofs + pos;
    e.method = u16(c + pos + 10);
    e.crc = u32(c + pos + 16);
    e.compressed_size = u32(c + pos + 20);
    e.size = u32(c + pos + 24);
    const uint16_t nlen = u16(c + pos + 28), xlen = u16(c + pos + 30), clen = u16(c + pos + 32);
    e.local_header = u32(c + pos + 42);
    if (pos + 46 + nlen + xlen + clen > cd_size)
      throw FormatError(where(path, "central directory entry runs past its end", (long long)(base_ + cd_ofs + pos)));
    e.name.assign(cd.get() + pos + 46, nlen);
    // zip64 extra: only the fields whose 32-bit slot is saturated are present, in this order.
    uint64_t x = pos + 46 + nlen;
    const uint64_t xend = x + xlen;
    while (x + 4 <= xend) {
      const uint16_t id = u16(c + x), len = u16(c + x + 2);
      if (x + 4 + len > xend) break;
      if (id == 1) {
        uint64_t f = x + 4;
        auto take = [&](uint64_t& field) {
          if (field != kBig32) return;
          if (f + 8 > x + 4 + len) throw FormatError(where(path, "short zip64 extra field in entry " + e.name));
          field = u64(c + f);
          f += 8;
        };
        take(e.size);
        take(e.compressed_size);
        take(e.local_header);
      }
      x += 4 + len;
    }
    if (e.method == 0 && e.size != e.compressed_size)
      throw FormatError(where(path, "stored entry " + e.name + " has different sizes"));
    if (e.local_header > fsize || e.compressed_size > fsize - e.local_header)
      throw FormatError(where(path, "entry " + e.name + " lies outside the file (truncated?)"));
    entries_.push_back(std::move(e));
    pos += 46 + nlen + xlen + clen;
  }
  const auto slash = entries_[0].name.find('/');
  if (slash == std::string::npos || slash == 0)
    throw FormatError(where(path, "first zip entry '" + entries_[0].name + "' is not in a subdirectory"));
  prefix_ = entries_[0].name.substr(0, slash);
}

const ZipEntry* ZipReader::find(const std::string& record) const {
  const std::string name = prefix_ + "/" + record;
  // A file whose records are each looked up (a decoded pickle: one per storage) gets a name index;
  // one asked for a few (data.pkl, version, a rank's buffers) is scanned instead, so that opening
  // a file of 100,000 records costs no 100,000 insertions.
  if (by_name_.empty() && ++finds_ > kScannedFinds) {
    by_name_.reserve(entries_.size());
    for (size_t k = 0; k < entries_.size(); ++k) by_name_.emplace(entries_[k].name, k);
  }
  if (by_name_.empty()) {
    for (const ZipEntry& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

uint64_t ZipReader::data_offset(const ZipEntry& e) const {
  unsigned char h[30];
  read_at(e.local_header, h, 30, "local header");
  if (u32(h) != kLocalSig)
    throw FormatError(
        where(file_.path(), "bad local header signature for " + e.name, (long long)(base_ + e.local_header)));
  const uint64_t ofs = e.local_header + 30 + u16(h + 26) + u16(h + 28);
  if (ofs > size_ || e.compressed_size > size_ - ofs)
    throw FormatError(where(file_.path(), "data of " + e.name + " runs past the end of the archive (truncated?)",
                            (long long)(base_ + ofs)));
  return base_ + ofs;
}

std::string ZipReader::read(const ZipEntry& e, uint64_t max_size) const {
  if (e.method != 0)
    throw FormatError(where(file_.path(), "record " + e.name + " is compressed; only stored records are supported"));
  if (e.size > max_size)
    throw FormatError(
        where(file_.path(), "record " + e.name + " is " + std::to_string(e.size) + " bytes, over the limit"));
  return file_.read_string(data_offset(e), e.size, e.name.c_str());
}

}  // namespace zm::pt
