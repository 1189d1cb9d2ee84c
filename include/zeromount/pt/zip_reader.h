#pragma once
// Reads the end records and central directory of a torch.save zip; never touches record data.
// The zip may be a byte range of a larger file: a DCP data file holds one torch.save archive per
// item, back to back [dcp §3].
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "zeromount/pt/file.h"

namespace zm::pt {

struct ZipEntry {
  std::string name;             // full name, with the archive prefix
  uint64_t local_header = 0;    // offset of the local header
  uint64_t central_header = 0;  // offset of its central directory record
  uint64_t size = 0;            // uncompressed size
  uint64_t compressed_size = 0;
  uint16_t method = 0;  // 0 = stored
  uint32_t crc = 0;
};

class ZipReader {
 public:
  // Throws FormatError naming the file for anything that is not a readable zip.
  explicit ZipReader(const File& file);
  // The archive that is bytes [base, base + size) of `file`: its own offsets count from `base`,
  // and data_offset() answers in the file's offsets. Throws FormatError when the range is not
  // inside the file.
  ZipReader(const File& file, uint64_t base, uint64_t size);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const std::string& prefix() const { return prefix_; }  // "archive", taken from entry 0 as torch does
  // Record by name without the prefix ("data.pkl"); nullptr if absent.
  const ZipEntry* find(const std::string& record) const;
  // File offset of the record's first data byte, from its local header (as getRecordOffset does).
  uint64_t data_offset(const ZipEntry& e) const;
  // Reads a whole small record (data.pkl, version) into memory, with a size cap.
  std::string read(const ZipEntry& e, uint64_t max_size) const;

 private:
  // Reads archive bytes [ofs, ofs + n), refusing any beyond the archive's end.
  void read_at(uint64_t ofs, void* buf, size_t n, const char* what) const;
  const File& file_;
  uint64_t base_ = 0, size_ = 0;  // the archive's range of file_
  std::vector<ZipEntry> entries_;
  // Built on the (kScannedFinds + 1)-th find; one reader is used by one thread.
  static constexpr size_t kScannedFinds = 8;
  mutable std::unordered_map<std::string, size_t> by_name_;
  mutable size_t finds_ = 0;
  std::string prefix_;
};

}  // namespace zm::pt
