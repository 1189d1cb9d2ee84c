#include "zeromount/pt/dtype.h"

#include <array>

namespace zm::pt {
namespace {

struct Info {
  DType d;
  size_t size;
  std::string_view name, storage, numpy, safetensors;
};

constexpr std::array<Info, 12> kInfo{{
    {DType::F32, 4, "float32", "FloatStorage", "<f4", "F32"},
    {DType::F16, 2, "float16", "HalfStorage", "<f2", "F16"},
    {DType::BF16, 2, "bfloat16", "BFloat16Storage", "<V2", "BF16"},
    {DType::F64, 8, "float64", "DoubleStorage", "<f8", "F64"},
    {DType::I64, 8, "int64", "LongStorage", "<i8", "I64"},
    {DType::I32, 4, "int32", "IntStorage", "<i4", "I32"},
    {DType::I16, 2, "int16", "ShortStorage", "<i2", "I16"},
    {DType::I8, 1, "int8", "CharStorage", "|i1", "I8"},
    {DType::U8, 1, "uint8", "ByteStorage", "|u1", "U8"},
    {DType::Bool, 1, "bool", "BoolStorage", "|b1", "BOOL"},
    {DType::C64, 8, "complex64", "ComplexFloatStorage", "<c8", "C64"},
    {DType::C128, 16, "complex128", "ComplexDoubleStorage", "<c16", "C128"},
}};

const Info& info(DType d) {
  return kInfo[static_cast<size_t>(d)];
}

}  // namespace

size_t element_size(DType d) {
  return info(d).size;
}
std::string_view dtype_name(DType d) {
  return info(d).name;
}
std::string_view storage_class(DType d) {
  return info(d).storage;
}
std::string_view numpy_descr(DType d) {
  return info(d).numpy;
}
std::string_view safetensors_name(DType d) {
  return info(d).safetensors;
}

std::optional<DType> dtype_from_storage(std::string_view name) {
  if (name == "UntypedStorage") return DType::U8;
  for (const auto& i : kInfo)
    if (i.storage == name) return i.d;
  return std::nullopt;
}

}  // namespace zm::pt
