// The zip record check: torch.load never compares a record's CRC-32 with its bytes, so a flipped
// bit in a tensor loads without a word. The records are checked here for being whole; their CRCs
// are computed from the bytes the pass reads anyway (FileSet::expect_crc, settle_crcs).
#include <string>

#include "readers.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::check {

void check_zip(FileSet& files, uint32_t id, uint64_t base, uint64_t size, const std::string& name, Findings& f) {
  const pt::File& file = files.file(id);
  std::unique_ptr<pt::ZipReader> zip;
  try {
    zip = base == 0 && size == file.size() ? std::make_unique<pt::ZipReader>(file)
                                           : std::make_unique<pt::ZipReader>(file, base, size);
  } catch (const Error& e) {
    f.fail("files-open", name, e.what());
    return;
  }
  f.ran("files-open");
  uint64_t unrecorded = 0;
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
    if (e.crc == 0 && e.compressed_size) {
      ++unrecorded;
      continue;
    }
    files.expect_crc(id, at, e.compressed_size, e.crc, subject);
  }
  if (unrecorded)
    f.notes.push_back(name + ": " + std::to_string(unrecorded) +
                      " record(s) with CRC 0 recorded (a file made by zeromount without -o crc): not compared");
}

std::unique_ptr<pt::PtFile> open_pt(const std::string& path, const std::string& name, Input& in, Findings& f) {
  try {
    const uint32_t id = in.files.add(path);
    check_zip(in.files, id, 0, in.files.file(id).size(), name, f);
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
