// Which kind of checkpoint a path is, in the order the issue ranks them: a DeepSpeed tag or
// checkpoint folder, a DCP folder, then anything else file by file (safetensors, universal, .pt).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "readers.h"
#include "zeromount/ds/checkpoint.h"
#include "zeromount/pt/crc32.h"
#include "zeromount/pt/error.h"

namespace zm::check {

namespace fs = std::filesystem;

namespace {

std::string hex32(uint32_t x) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", x);
  return b;
}

}  // namespace

uint32_t FileSet::add(const std::string& path) {
  for (size_t k = 0; k < files_.size(); ++k)
    if (files_[k]->path() == path) return uint32_t(k);
  files_.push_back(std::make_unique<pt::File>(path));
  return uint32_t(files_.size() - 1);
}

void FileSet::pread(uint32_t file, uint64_t offset, void* buf, size_t n) const {
  files_.at(file)->read_exact(offset, buf, n, "tensor bytes");
  if (file < records_.size() && !records_[file].empty()) note_read(file, offset, static_cast<const char*>(buf), n);
}

void FileSet::expect_crc(uint32_t file, uint64_t offset, uint64_t length, uint32_t crc, std::string subject) {
  if (records_.size() <= file) {
    records_.resize(file + 1);
    sorted_.resize(file + 1, true);
  }
  auto& rs = records_[file];
  if (!rs.empty() && rs.back().offset > offset) sorted_[file] = false;
  rs.push_back(Record{offset, length, crc, std::move(subject), {}});
}

void FileSet::note_read(uint32_t file, uint64_t offset, const char* buf, size_t n) const {
  auto& rs = records_[file];
  if (!sorted_[file]) {
    std::stable_sort(rs.begin(), rs.end(), [](const Record& a, const Record& b) { return a.offset < b.offset; });
    sorted_[file] = true;
  }
  // The last record that starts at or before `offset`, then those that start inside the read. A
  // record that overlaps another (a hostile zip) may miss pieces: settle_crcs reads what it lacks.
  auto it = std::upper_bound(rs.begin(), rs.end(), offset, [](uint64_t o, const Record& r) { return o < r.offset; });
  if (it != rs.begin()) --it;
  const uint64_t end = offset + n;
  for (; it != rs.end() && it->offset < end; ++it) {
    const uint64_t lo = std::max(offset, it->offset), hi = std::min(end, it->offset + it->length);
    if (lo >= hi) continue;
    const uint32_t crc = pt::crc32(buf + (lo - offset), size_t(hi - lo));
    if (!it->pieces.empty() && it->pieces.back().offset + it->pieces.back().length == lo) {
      Piece& last = it->pieces.back();
      last.crc = pt::crc32_combine(last.crc, crc, hi - lo);
      last.length += hi - lo;
    } else {
      it->pieces.push_back(Piece{lo, hi - lo, crc});
    }
  }
}

uint64_t FileSet::settle_crcs(Findings& f) {
  std::vector<char> buf(1 << 20);
  uint64_t read = 0;
  for (size_t file = 0; file < records_.size(); ++file) {
    // Reads [from, to) of the file into the running CRC.
    const auto gap = [&](uint64_t from, uint64_t to, uint32_t crc) {
      for (uint64_t at = from; at < to;) {
        const size_t n = size_t(std::min<uint64_t>(buf.size(), to - at));
        files_[file]->read_exact(at, buf.data(), n, "zip record");
        crc = pt::crc32(buf.data(), n, crc);
        at += n;
      }
      read += to - from;
      return crc;
    };
    for (Record& r : records_[file]) {
      std::sort(r.pieces.begin(), r.pieces.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
      uint32_t crc = 0;
      uint64_t at = r.offset;
      try {
        for (const Piece& p : r.pieces) {
          if (p.offset < at) continue;  // read twice (or overlapping): the gap before the next covers it
          crc = gap(at, p.offset, crc);
          crc = pt::crc32_combine(crc, p.crc, p.length);
          at = p.offset + p.length;
        }
        crc = gap(at, r.offset + r.length, crc);
      } catch (const Error& e) {
        f.fail("zip-crc", r.subject, e.what());
        continue;
      }
      if (crc != r.crc)
        f.fail("zip-crc", r.subject,
               "CRC-32 " + hex32(crc) + " of its bytes, " + hex32(r.crc) +
                   " recorded: the record changed after it was written (bit rot, a partial copy or an edit)");
    }
  }
  records_.clear();
  sorted_.clear();
  return read;
}

uint64_t Item::numel() const {
  return pt::numel(shape);
}

std::unique_ptr<Input> open_input(const std::string& path, const std::string& tag, Findings& f) {
  auto in = std::make_unique<Input>();
  in->path = path;
  f.input = path;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw Error(path + ": no such file or folder", ENOENT);
  if (fs::is_directory(st) && fs::exists(fs::path(path) / ".metadata")) {
    in->kind = "dcp folder";
    read_dcp(path, *in, f);
  } else if (fs::is_directory(st) && [&] {
               const ds::CheckpointDir d = ds::scan_checkpoint(path);
               return d.root_is_tag || !d.tags.empty();
             }()) {
    in->kind = "deepspeed checkpoint";
    read_deepspeed(path, tag, *in, f);
  } else {
    if (!tag.empty())
      throw Error(path + ": --tag " + tag + ": not a DeepSpeed checkpoint folder (no tag folders)", EINVAL);
    read_files(path, *in, f);
  }
  f.kind = in->kind;
  return in;
}

}  // namespace zm::check
