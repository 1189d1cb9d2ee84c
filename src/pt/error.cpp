#include "zeromount/pt/error.h"

namespace zm {

std::string where(const std::string& file, const std::string& what, long long offset) {
  std::string s = file;
  if (offset >= 0) s += " @" + std::to_string(offset);
  return s + ": " + what;
}

}  // namespace zm
