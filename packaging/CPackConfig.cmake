# `cpack -G DEB` in the build folder makes zeromount_<version>-<release>_<arch>.deb, clean under
# lintian (Debian 12). What it holds is the install() rules of the top-level CMakeLists.txt; the
# copyright file and the changelog are in this folder, the man page is docs/zeromount.1.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "zeromount")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "zeromount maintainers <maintainers@users.noreply.a-seed-47ebba88.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "read-only FUSE view of DeepSpeed ZeRO checkpoints as universal checkpoints")
# The extended description: lines of at most 79 characters once indented (lintian).
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "zeromount mounts a DeepSpeed ZeRO-1/2/3 checkpoint folder read-only. Beside\n"
    "every tag folder it shows made-up folders: the universal checkpoint that\n"
    "ds_to_universal.py would write (load it at any ZeRO stage and data-parallel\n"
    "size), the weights as safetensors, the training state as a\n"
    "torch.distributed.checkpoint folder, per-parameter files for numpy, report\n"
    "pages, and native layouts at other stages, DP sizes and precisions. Nothing\n"
    "is converted or copied: each file's bytes are read from the checkpoint's\n"
    "shards when the file is read.\n"
    "\n"
    "The package holds the zeromount command (also inspect, dump and export,\n"
    "which need no FUSE) and the mount.fuse.zeromount helper, for\n"
    "mount -t fuse.zeromount and /etc/fstab lines.")
# The Debian revision: the version of the newest entry of packaging/changelog (zeromount (V-R) ...).
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/changelog ZM_CHANGELOG_TOP LIMIT_COUNT 1)
if(ZM_CHANGELOG_TOP MATCHES "^zeromount \\(([^)-]+)-([^)]+)\\)")
  set(CPACK_DEBIAN_PACKAGE_RELEASE ${CMAKE_MATCH_2})
  if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
    message(WARNING "packaging/changelog: its newest entry is for ${CMAKE_MATCH_1}, the project is "
                    "${PROJECT_VERSION}: add an entry for ${PROJECT_VERSION}-1 before packaging")
  endif()
else()
  message(FATAL_ERROR "packaging/changelog: the first line is not 'zeromount (VERSION-REVISION) ...'")
endif()
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# fuse3 for fusermount3 (mounts as a user, unmounts); the libraries from dpkg-shlibdeps (dpkg-dev).
# Without dpkg-shlibdeps, the list it gives on Debian 12.
find_program(ZM_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(ZM_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3")
else()
  string(CONCAT CPACK_DEBIAN_PACKAGE_DEPENDS
      "fuse3, libc6 (>= 2.34), libfmt9 (>= 9.1.0+ds1), libfuse3-3 (>= 3.12.0), libgcc-s1 (>= 3.0), "
      "libspdlog1.10-fmt9, libstdc++6 (>= 11), libxxhash0 (>= 0.7.0)")
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE "xz")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
include(CPack)
