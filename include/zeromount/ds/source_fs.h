#pragma once
// What kind of filesystem SRC's files live on (statfs(2)'s f_type), for the defaults that suit a
// network filesystem or an object-storage client (rclone, s3fs, mountpoint-s3 are FUSE): a rescan
// lists SRC through the network, a read ahead of what was asked is a paid range request, and the
// index cache trusts size, mtime and inode instead of reading every shard's pickle again.
#include <string>

namespace zm::ds {

// "FUSE", "NFS", "CIFS", "Lustre", "GPFS", "CephFS", ... for a network or FUSE filesystem; "" for a
// local one, or when statfs fails (the local defaults are the safe ones).
std::string network_filesystem(const std::string& path);
std::string network_filesystem(int fd);

}  // namespace zm::ds
