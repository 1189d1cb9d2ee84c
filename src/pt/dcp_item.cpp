#include "zeromount/pt/dcp_item.h"

#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/value.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::pt::dcp {

ChunkBytes chunk_bytes(const File& data_file, const StoredKey& k, const StoredChunk& c) {
  const std::string& path = data_file.path();
  auto fail = [&](const std::string& what) -> ChunkBytes {
    throw FormatError(where(path, "key '" + k.fqn + "': item @" + std::to_string(c.storage.offset) + ": " + what));
  };
  if (!k.tensor) return fail("a bytes item holds no tensor");
  const ZipReader zip(data_file, c.storage.offset, c.storage.length);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) return fail("no data.pkl record in archive '" + zip.prefix() + "'");
  // Within the item: the zip reader checked every record against the item's range.
  const std::string pickle = zip.read(*pkl, c.storage.length);
  const StorageResolver resolve = [&](const std::string& key, uint64_t nbytes) -> uint64_t {
    const ZipEntry* rec = zip.find("data/" + key);
    if (!rec || rec->method != 0 || rec->size != nbytes)
      fail("storage record data/" + key + " is missing, compressed or not " + std::to_string(nbytes) + " bytes");
    return zip.data_offset(*rec);
  };
  Arena arena;
  const Node* root = decode_pickle(pickle, arena, path, resolve);
  if (!root->is(Kind::Tensor)) return fail("holds " + repr(root) + ", not a tensor");
  const Tensor& t = *root->tensor;
  if (t.dtype != k.dtype)
    return fail("holds " + std::string(dtype_name(t.dtype)) + ", the key is " + std::string(dtype_name(k.dtype)));
  if (t.shape != c.sizes || !t.contiguous()) return fail("its tensor is not a contiguous tensor of the chunk's sizes");
  return {t.byte_offset(), t.nbytes()};
}

const Node* item_value(const File& data_file, const StoredKey& k, Arena& arena) {
  const std::string& path = data_file.path();
  if (k.tensor || k.chunks.size() != 1)
    throw FormatError(where(path, "key '" + k.fqn + "': a tensor, not a bytes item"));
  const StorageInfo& at = k.chunks[0].storage;
  const ZipReader zip(data_file, at.offset, at.length);
  const ZipEntry* pkl = zip.find("data.pkl");
  if (!pkl) throw FormatError(where(path, "key '" + k.fqn + "': item @" + std::to_string(at.offset) + ": no data.pkl"));
  const std::string pickle = zip.read(*pkl, at.length);
  const StorageResolver no_tensors = [&](const std::string&, uint64_t) -> uint64_t {
    throw FormatError(where(path, "key '" + k.fqn + "': a bytes item that holds a tensor"));
  };
  return decode_pickle(pickle, arena, path, no_tensors);
}

}  // namespace zm::pt::dcp
