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

uint64_t pickle_hash(const File& file) {
  const ZipReader zip(file);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw FormatError(file.path() + ": no data.pkl");
  const std::string bytes = zip.read(*pkl, file.size());
  return hash_bytes(bytes.data(), bytes.size());
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

namespace {

// A file opened as far as its pickle: its zip directory read, data.pkl and version found, and the
// pickle's bytes read, unless the file is opened `like` another: then only their hash is taken,
// and only when their size is the other's.
struct Opened {
  std::unique_ptr<PtFile> pt;
  std::unique_ptr<ZipReader> zip;  // reads pt->file
  std::string pickle;
};

Opened open_pt(const std::string& path, const PtFile* like = nullptr) {
  Opened o;
  o.pt = std::make_unique<PtFile>();
  o.pt->file = File(path);
  o.zip = std::make_unique<ZipReader>(o.pt->file);
  const ZipReader& zip = *o.zip;
  o.pt->prefix = zip.prefix();
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw FormatError(where(path, "no data.pkl record in archive '" + zip.prefix() + "'"));
  const ZipEntry* version = zip.find(".data/version");
  if (!version) version = zip.find("version");
  if (!version) throw FormatError(where(path, "no version record in archive '" + zip.prefix() + "'"));
  if (like) {
    o.pt->pickle_size = pkl->size;
    if (pkl->size != like->pickle_size || pkl->method != 0) return o;
    o.pt->pickle_offset = zip.data_offset(*pkl);
    o.pt->pickle_hash = hash_range(o.pt->file, o.pt->pickle_offset, pkl->size);
    return o;
  }
  // A pickle cannot be larger than the file that holds it; the zip reader checked that.
  o.pickle = zip.read(*pkl, o.pt->file.size());
  o.pt->pickle_offset = zip.data_offset(*pkl);
  o.pt->pickle_size = o.pickle.size();
  o.pt->pickle_hash = hash_bytes(o.pickle.data(), o.pickle.size());
  return o;
}

// The stored record data/<key> of `nbytes` bytes, or null with the reason in `why`: missing,
// compressed or of another size.
const ZipEntry* stored_record(const ZipReader& zip, const std::string& key, uint64_t nbytes, std::string& why) {
  const ZipEntry* rec = zip.find("data/" + key);
  if (!rec)
    why = "storage record data/" + key + " is missing";
  else if (rec->method != 0)
    why = "storage record data/" + key + " is compressed";
  else if (rec->size != nbytes)
    why = "storage record data/" + key + " holds " + std::to_string(rec->size) + " bytes, its pickle says " +
          std::to_string(nbytes);
  else
    return rec;
  return nullptr;
}

}  // namespace

std::unique_ptr<PtFile> load_pt(const std::string& path, const PickleLimits& limits) {
  Opened o = open_pt(path);
  const ZipReader& zip = *o.zip;
  StorageResolver resolve = [&](const std::string& key, uint64_t nbytes) -> uint64_t {
    std::string why;
    const ZipEntry* rec = stored_record(zip, key, nbytes, why);
    if (!rec) throw FormatError(where(path, why));
    return zip.data_offset(*rec);
  };
  o.pt->root = decode_pickle(o.pickle, o.pt->arena, path, resolve, limits);
  return std::move(o.pt);
}

std::unique_ptr<PtFile> load_pt_like(const std::string& path, const PtFile& like) {
  Opened o = open_pt(path, &like);
  if (o.pt->pickle_size != like.pickle_size || o.pt->pickle_hash != like.pickle_hash) return nullptr;
  o.pt->root = like.root;
  o.pt->like = &like;
  o.pt->records = std::move(o.zip);
  return std::move(o.pt);
}

bool PtFile::same_record(const Tensor& t) const {
  if (!like) return true;
  std::string why;
  const StorageRecord& r = t.record();
  const ZipEntry* rec = stored_record(*records, r.key, r.numel * element_size(t.dtype), why);
  return rec && records->data_offset(*rec) == r.offset;
}

}  // namespace zm::pt
