// The zip record check: torch.load never compares a record's CRC-32 with its bytes, so a flipped
// bit in a tensor loads without a word. This reads every record once and compares.
#include <cstdio>
#include <vector>

#include "readers.h"
#include "zeromount/pt/crc32.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::check {

namespace {

std::string hex(uint32_t x) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", x);
  return b;
}

}  // namespace

uint64_t check_zip(const pt::File& file, uint64_t base, uint64_t size, const std::string& name, Findings& f) {
  std::unique_ptr<pt::ZipReader> zip;
  try {
    zip = base == 0 && size == file.size() ? std::make_unique<pt::ZipReader>(file)
                                           : std::make_unique<pt::ZipReader>(file, base, size);
  } catch (const Error& e) {
    f.fail("files-open", name, e.what());
    return 0;
  }
  f.ran("files-open");
  static thread_local std::vector<char> buf(1 << 20);
  uint64_t read = 0, unrecorded = 0;
  for (const auto& e : zip->entries()) {
    f.ran("zip-crc");
    const std::string subject = name + ": record " + e.name;
    uint64_t at = 0;
    try {
      at = zip->data_offset(e);
    } catch (const Error& x) {
      f.fail("zip-crc", subject, std::string("incomplete record: ") + x.what());
      continue;
    }
    if (at + e.compressed_size > base + size || at + e.compressed_size < at) {
      f.fail("zip-crc", subject,
             "incomplete record: its " + std::to_string(e.compressed_size) + " bytes at offset " + std::to_string(at) +
                 " run past the archive's end (" + std::to_string(base + size) + "): a truncated file");
      continue;
    }
    if (e.method != 0) continue;  // compressed: torch writes stored records only; its CRC is of the inflated bytes
    uint32_t crc = 0;
    for (uint64_t done = 0; done < e.compressed_size;) {
      const size_t n = size_t(std::min<uint64_t>(buf.size(), e.compressed_size - done));
      file.read_exact(at + done, buf.data(), n, "zip record");
      crc = pt::crc32(buf.data(), n, crc);
      done += n;
    }
    read += e.compressed_size;
    if (crc == e.crc) continue;
    if (e.crc == 0) {
      ++unrecorded;
      continue;
    }
    f.fail("zip-crc", subject,
           "CRC-32 " + hex(crc) + " of its bytes, " + hex(e.crc) +
               " recorded: the record changed after it was written (bit rot, a partial copy or an edit)");
  }
  if (unrecorded)
    f.notes.push_back(name + ": " + std::to_string(unrecorded) +
                      " record(s) with CRC 0 recorded (a file made by zeromount without -o crc): not compared");
  f.bytes_read += read;
  return read;
}

std::unique_ptr<pt::PtFile> open_pt(const std::string& path, const std::string& name, Findings& f) {
  try {
    pt::File file(path);
    check_zip(file, 0, file.size(), name, f);
  } catch (const Error& e) {
    f.fail("files-open", name, e.what());
    return nullptr;
  }
  try {
    auto pt = pt::load_pt(path);
    f.ran("files-open");
    return pt;
  } catch (const Error& e) {
    f.fail("files-open", name, e.what());
    return nullptr;
  }
}

}  // namespace zm::check
