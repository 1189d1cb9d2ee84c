#pragma once
// Reads the end records and central directory of a torch.save zip; never touches record data.
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

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const std::string& prefix() const { return prefix_; }  // "archive", taken from entry 0 as torch does
  // Record by name without the prefix ("data.pkl"); nullptr if absent.
  const ZipEntry* find(const std::string& record) const;
  // Offset of the record's first data byte, from its local header (as getRecordOffset does).
  uint64_t data_offset(const ZipEntry& e) const;
  // Reads a whole small record (data.pkl, version) into memory, with a size cap.
  std::string read(const ZipEntry& e, uint64_t max_size) const;

 private:
  const File& file_;
  std::vector<ZipEntry> entries_;
  // Built on the (kScannedFinds + 1)-th find; one reader is used by one thread.
  static constexpr size_t kScannedFinds = 8;
  mutable std::unordered_map<std::string, size_t> by_name_;
  mutable size_t finds_ = 0;
  std::string prefix_;
};

}  // namespace zm::pt
