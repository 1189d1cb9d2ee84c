#pragma once
// Lays out a .pt file exactly as torch.save does (stored zip, 64-byte aligned records, data
// descriptors, zip64 end records) from a value tree whose tensors carry their storages' bytes.
// Every header byte and the total size depend only on names and sizes, never on tensor bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/pt/value.h"
#include "zeromount/pt/virtual_file.h"

namespace zm::pt {

struct PtOptions {
  std::string prefix = "archive";  // torch.save(obj, "x/fp32.pt") uses the stem: "fp32"
  bool byteorder = true;           // torch >= 2.1 writes a 'byteorder' record; 1.13 does not
  bool legacy_key_order = false;   // 1.13 writes data records in sorted(str) key order: 0, 1, 10, 2
  // Real CRC-32s for generic zip tools. torch.load never checks them; computing them reads
  // every tensor byte through `crc_source` now instead of lazily.
  const ExtentReader* crc_source = nullptr;
};

VirtualFile build_pt(const Node* root, const PtOptions& opts = {});

// What a .pt file's layout depends on: its pickle's length and its storage records' sizes, in
// key order. Files whose pickles are the same have the same records under any archive name.
struct PtRecords {
  uint64_t pickle = 0;
  std::vector<uint64_t> storages;
  bool operator==(const PtRecords&) const = default;
};
PtRecords pt_records(const Node* root);  // emits the pickle once to measure it
// The size build_pt(root, opts) has for a root of these records, without building it.
uint64_t pt_size(const PtRecords& records, const PtOptions& opts);

// Writes the real CRC-32 of every record into a .pt file written out from a VirtualFile (its
// central directory and data descriptors), so that `unzip -t` and Python's zipfile accept it.
// For exported files, which are written once: the mount serves CRC 0, which torch.load ignores.
void write_record_crcs(const std::string& path);

}  // namespace zm::pt
