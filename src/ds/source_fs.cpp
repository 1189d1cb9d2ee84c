#include "zeromount/ds/source_fs.h"

#include <sys/statfs.h>

#include <cstdint>

namespace zm::ds {

namespace {

// Magic numbers from linux/magic.h and the filesystems' own headers (Lustre, GPFS, BeeGFS are out
// of tree). FUSE covers fuseblk too, and every FUSE client: rclone, s3fs, mountpoint-s3, gcsfuse,
// blobfuse2, sshfs, GlusterFS.
std::string kind_of(uint64_t type) {
  switch (type) {
    case 0x65735546:
      return "FUSE";
    case 0x6969:
      return "NFS";
    case 0xFF534D42:
      return "CIFS";
    case 0xFE534D42:
      return "SMB2";
    case 0x517B:
      return "SMB";
    case 0x0BD00BD0:
      return "Lustre";
    case 0x47504653:
      return "GPFS";
    case 0x00C36400:
      return "CephFS";
    case 0x19830326:
      return "BeeGFS";
    case 0x01021997:
      return "9P";
    case 0x5346414F:
      return "AFS";
    case 0x6B414653:
      return "AFS";
    case 0x73757245:
      return "Coda";
    default:
      return "";
  }
}

}  // namespace

std::string network_filesystem(const std::string& path) {
  struct statfs s;
  return ::statfs(path.c_str(), &s) == 0 ? kind_of(uint64_t(uint32_t(s.f_type))) : "";
}

std::string network_filesystem(int fd) {
  struct statfs s;
  return ::fstatfs(fd, &s) == 0 ? kind_of(uint64_t(uint32_t(s.f_type))) : "";
}

}  // namespace zm::ds
