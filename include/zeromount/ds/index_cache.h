#pragma once
// A persistent cache of tag indexes in $XDG_CACHE_HOME/zeromount (~/.cache/zeromount), so that a
// second mount of the same checkpoint skips decoding the pickles. An entry is used only if every
// shard still has the size, mtime, inode and XXH3 of its pickle bytes it had when indexed, the
// tag folder holds the same shard names, and the entry's own checksum holds; otherwise the tag is
// indexed again and the entry rewritten. On a network source (ds/source_fs.h) the pickle bytes are
// not read again: size, mtime and inode decide. ZEROMOUNT_NO_INDEX_CACHE=1 turns it off.
#include <memory>
#include <string>

#include "zeromount/ds/tag_index.h"

namespace zm::ds {

std::string index_cache_dir();  // "" when there is no usable cache folder
// index_tag() through the cache. `hit` (if given) tells whether the cache served it.
std::unique_ptr<TagIndex> index_tag_cached(const std::string& tag_dir, bool* hit = nullptr, bool tp_strict = true);

// Exposed for tests.
std::string serialize_index(const TagIndex& ix);
std::unique_ptr<TagIndex> deserialize_index(const std::string& bytes);  // throws FormatError

}  // namespace zm::ds
