#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zm::pt {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool, C64, C128 };

size_t element_size(DType d);
std::string_view dtype_name(DType d);        // "float32", as torch prints it
std::string_view storage_class(DType d);     // "FloatStorage", the pickle GLOBAL name in module torch
std::string_view numpy_descr(DType d);       // "<f4", for .npy headers
std::string_view safetensors_name(DType d);  // "F32"
// From a storage GLOBAL name ("FloatStorage", "UntypedStorage" -> U8).
std::optional<DType> dtype_from_storage(std::string_view name);

}  // namespace zm::pt
