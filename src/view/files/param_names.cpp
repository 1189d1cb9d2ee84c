#include "zeromount/view/files/param_names.h"

#include <xxhash.h>

#include <cstdio>

namespace zm::view {

std::string param_dir_name(std::string_view name, std::initializer_list<std::string_view> taken) {
  if (name == ".") return "%2E";
  if (name == "..") return "%2E%2E";
  for (std::string_view t : taken)
    if (name == t) {
      char h[4];
      snprintf(h, sizeof h, "%%%02X", (unsigned char)name[0]);
      return h + std::string(name.substr(1));
    }
  std::string out;
  for (char c : name) {
    if (c == '/')
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
