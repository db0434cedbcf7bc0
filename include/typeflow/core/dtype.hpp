// Element types: float, double, int32, int64, bool, and the 16-bit storage types bfloat16 and
// float16 (core/half.hpp), each with the name used in messages.
#pragma once

/// Marks the scalar functions that fused kernels call on both sides: host and, under nvcc,
/// device (the CUDA backend instantiates its kernels from the same op functors).
#if defined(__CUDACC__)
#define TYPEFLOW_HD __host__ __device__
#else
#define TYPEFLOW_HD
#endif
#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace typeflow {

/// What a session's convolutions and matrix products compute in (session_options::precision).
enum class precision {
  float32,  ///< float32 throughout
  bfloat16, ///< convolutions and matmuls read their operands rounded to bfloat16 and accumulate
            ///< and write float32 (oneDNN, CPUs with AVX512-BF16 or AMX; float32 elsewhere)
  float16,  ///< convolutions and matmuls read their operands rounded to float16 and accumulate
            ///< and write float32: float16's numerics (underflow below 2^-24, overflow past
            ///< 65504: what loss scaling is for), emulated on float32 kernels (oneDNN builds)
};

template <class T>
struct dtype_traits; // only the five dtypes below and the two of half.hpp are defined

template <>
struct dtype_traits<float> {
  static constexpr std::string_view name = "float32";
};
template <>
struct dtype_traits<double> {
  static constexpr std::string_view name = "float64";
};
template <>
struct dtype_traits<std::int32_t> {
  static constexpr std::string_view name = "int32";
};
template <>
struct dtype_traits<std::int64_t> {
  static constexpr std::string_view name = "int64";
};
template <>
struct dtype_traits<bool> {
  static constexpr std::string_view name = "bool";
};

/// One of the supported element types.
template <class T>
concept dtype = requires {
  dtype_traits<T>::name;
};

template <class T>
inline constexpr std::string_view dtype_name = dtype_traits<T>::name;

template <class T>
inline constexpr bool is_floating = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T>
inline constexpr bool is_integral_dtype =
    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

using int32 = std::int32_t;
using int64 = std::int64_t;
using float32 = float;
using float64 = double;

} // namespace typeflow

#include "half.hpp" // bfloat16, float16: dtypes too
