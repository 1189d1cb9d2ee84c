#pragma once
// How a parameter name becomes a folder name inside made-up folders.
#include <string>
#include <string_view>

namespace zm::view {

// '%' and '/' are percent-encoded, "." and ".." become "%2E" and "%2E%2E"; a name over 255 bytes
// is cut and suffixed with its hash (its info file keeps it whole).
std::string param_dir_name(std::string_view name);

}  // namespace zm::view
