#include "zeromount/pt/pt_file.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "zeromount/pt/error.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::pt {

uint64_t hash_bytes(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

uint64_t hash_range(const File& file, uint64_t offset, uint64_t n) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) throw Error("out of memory hashing " + file.path(), ENOMEM);
  std::vector<char> buf(std::min<uint64_t>(n, uint64_t(1) << 20));
  for (uint64_t done = 0; done < n;) {
    const size_t chunk = size_t(std::min<uint64_t>(buf.size(), n - done));
    file.read_exact(offset + done, buf.data(), chunk, "tensor bytes");
    XXH3_64bits_update(state.get(), buf.data(), chunk);
    done += chunk;
  }
  return XXH3_64bits_digest(state.get());
}

std::unique_ptr<PtFile> load_pt(const std::string& path, const PickleLimits& limits) {
  auto pt = std::make_unique<PtFile>();
  pt->file = File(path);
  ZipReader zip(pt->file);
  pt->prefix = zip.prefix();
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw FormatError(where(path, "no data.pkl record in archive '" + zip.prefix() + "'"));
  // A pickle cannot be larger than the file that holds it; the zip reader checked that.
  const std::string bytes = zip.read(*pkl, pt->file.size());
  pt->pickle_offset = zip.data_offset(*pkl);
  pt->pickle_size = bytes.size();
  pt->pickle_hash = hash_bytes(bytes.data(), bytes.size());
  const ZipEntry* version = zip.find(".data/version");
  if (!version) version = zip.find("version");
  if (!version) throw FormatError(where(path, "no version record in archive '" + zip.prefix() + "'"));

  StorageResolver resolve = [&](const std::string& key, uint64_t nbytes) -> uint64_t {
    const ZipEntry* rec = zip.find("data/" + key);
    if (!rec) throw FormatError(where(path, "storage record data/" + key + " is missing"));
    if (rec->method != 0) throw FormatError(where(path, "storage record data/" + key + " is compressed"));
    if (rec->size != nbytes)
      throw FormatError(where(path, "storage record data/" + key + " holds " + std::to_string(rec->size) +
                                        " bytes, its pickle says " + std::to_string(nbytes)));
    return zip.data_offset(*rec);
  };
  pt->root = decode_pickle(bytes, pt->arena, path, resolve, limits);
  return pt;
}

}  // namespace zm::pt
