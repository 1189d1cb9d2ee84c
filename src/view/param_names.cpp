#include "zeromount/view/param_names.h"

#include <xxhash.h>

#include <cstdio>

namespace zm::view {

std::string param_dir_name(std::string_view name) {
  if (name == ".") return "%2E";
  if (name == "..") return "%2E%2E";
  std::string out;
  for (char c : name) {
    if (c == '%')
      out += "%25";
    else if (c == '/')
      out += "%2F";
    else if (c == '\0')
      out += "%00";
    else
      out.push_back(c);
  }
  if (out.empty()) return "%";
  if (out.size() > 255) {
    char h[24];
    snprintf(h, sizeof h, "%%~%016llx", (unsigned long long)XXH3_64bits(name.data(), name.size()));
    out = out.substr(0, 200) + h;
  }
  return out;
}

}  // namespace zm::view
