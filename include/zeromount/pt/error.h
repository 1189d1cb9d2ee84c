#pragma once
// Errors carry an errno so that exactly one place (the FUSE adapter) maps them to replies,
// and a message that names the file and, where known, the byte offset or pickle key.
#include <cerrno>
#include <stdexcept>
#include <string>

namespace zm {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string msg, int err = EIO) : std::runtime_error(std::move(msg)), errno_(err) {}
  int errno_value() const noexcept { return errno_; }

 private:
  int errno_;
};

// Input that does not follow the format: a truncated zip, a hostile pickle, a missing key.
class FormatError : public Error {
 public:
  explicit FormatError(std::string msg) : Error(std::move(msg), EIO) {}
};

// "file: what" with an optional byte offset; the one spelling every layer uses.
std::string where(const std::string& file, const std::string& what, long long offset = -1);

}  // namespace zm
