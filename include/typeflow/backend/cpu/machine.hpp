// describe_machine(): which CPU this is and what each CPU engine makes of it, so that a slow
// run on a new machine says why (Debian bookworm's OpenBLAS 0.3.21, for one, runs its generic
// SSE3 "Prescott" kernels on CPUs newer than itself).
#pragma once
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../../core/compiled.hpp"
#include "gemm.hpp"
#include "onednn.hpp"
#include "simd.hpp"

namespace typeflow {

/// What describe_machine() found.
struct machine_info {
  std::string cpu;                   ///< /proc/cpuinfo's model name, family and model
  std::vector<std::string> features; ///< the vector ISA extensions the CPU reports
  std::string fused_isa;             ///< what the fused elementwise loops were compiled for
  std::string onednn_isa;            ///< what oneDNN's kernels use ("" without oneDNN)
  std::string blas;                  ///< the BLAS core in use ("" without BLAS)
  bool bf16_products = false;        ///< precision::bfloat16 computes in bfloat16 here
  std::vector<std::string> warnings; ///< engines running below what the CPU can do

  /// One line: "CPU ...; fused loops ...; oneDNN ...; BLAS ...", then one line per warning.
  std::string str() const;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL std::string machine_info::str() const {
  std::string s = "machine: " + cpu;
  if (!features.empty()) {
    s += " (";
    for (std::size_t i = 0; i < features.size(); ++i)
      s += (i ? " " : "") + features[i];
    s += ")";
  }
  s += "; fused loops: " + fused_isa;
  s += "; convolutions and float32 matmul: " +
       (onednn_isa.empty() ? std::string("im2col + BLAS (no oneDNN)") : "oneDNN " + onednn_isa);
  if (!onednn_isa.empty())
    s += bf16_products ? "; bfloat16 products: native"
                       : "; bfloat16 products: not native (precision::bfloat16 computes in "
                         "float32)";
  if (!blas.empty())
    s += "; BLAS (float64): " + blas;
  for (const auto& w : warnings)
    s += "\nwarning: " + w;
  return s;
}
#endif

namespace detail {

inline std::string cpuinfo_field(const std::string& text, const std::string& key) {
  std::size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const std::size_t colon = text.find(':', at), end = text.find('\n', at);
      if (colon != std::string::npos && colon < end) {
        std::string v = text.substr(colon + 1, end - colon - 1);
        const std::size_t b = v.find_first_not_of(" \t");
        return b == std::string::npos ? "" : v.substr(b);
      }
    }
    at += key.size();
  }
  return "";
}

/// Whether an OpenBLAS core name is one of its generic pre-AVX2 targets.
inline bool blas_core_is_generic(const std::string& core) {
  for (const char* g : {"Prescott", "Core2", "Katmai", "Northwood", "Penryn", "Dunnington",
                        "Nehalem", "Atom", "Opteron", "Barcelona", "generic"})
    if (core == g)
      return true;
  return false;
}

} // namespace detail

/// The CPU, the ISA each CPU engine uses on it, and any engine running a generic fallback on a
/// CPU that can do better.
TYPEFLOW_DECL_DEFERRED machine_info describe_machine()
#if TYPEFLOW_BODIES
{
  machine_info m;
  {
    std::ifstream f("/proc/cpuinfo");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string name = detail::cpuinfo_field(text, "model name");
    const std::string family = detail::cpuinfo_field(text, "cpu family");
    const std::string model = detail::cpuinfo_field(text, "model\t");
    m.cpu = name.empty() ? "unknown CPU" : name;
    if (!family.empty())
      m.cpu += ", family " + family + " model " + model;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx2)
    m.features.push_back("avx2+fma");
  if (avx512)
    m.features.push_back("avx512f");
  if (__builtin_cpu_supports("avx512bf16"))
    m.features.push_back("avx512_bf16");
#else
  const bool avx2 = false, avx512 = false;
#endif
#if defined(TYPEFLOW_HAS_XSIMD)
  m.fused_isa = std::string("xsimd ") + cpu_backend::simd::vec<float>::arch_type::name() + ", " +
                std::to_string(cpu_backend::simd::vec<float>::size) + " float lanes";
#else
  m.fused_isa = "scalar loops (no xsimd)";
#endif
#if defined(__x86_64__)
#if !defined(__AVX2__)
  if (avx2)
    m.warnings.push_back("typeflow was compiled without AVX2 on a CPU that has it: the fused "
                         "loops run on narrower vectors (compile with -march=native, as "
                         "TYPEFLOW_NATIVE does)");
#endif
#endif
#if defined(TYPEFLOW_HAS_ONEDNN)
  m.onednn_isa = cpu_backend::onednn::isa_name();
  m.bf16_products = cpu_backend::onednn::native_bf16();
  if ((avx2 && (m.onednn_isa == "sse41" || m.onednn_isa == "avx" || m.onednn_isa == "generic")) ||
      (avx512 && m.onednn_isa.rfind("avx512", 0) != 0))
    m.warnings.push_back("oneDNN runs " + m.onednn_isa + " kernels on a CPU with " +
                         (avx512 ? "AVX-512" : "AVX2") + " (ONEDNN_MAX_CPU_ISA set?)");
#endif
#if defined(TYPEFLOW_HAS_CBLAS) && defined(OPENBLAS_VERSION)
  m.blas = std::string("OpenBLAS ") + openblas_get_corename();
  {
    const std::string core = openblas_get_corename();
    if (detail::blas_core_is_generic(core) && avx2)
      m.warnings.push_back(
          "OpenBLAS does not know this CPU and runs its generic " + core +
          " kernels, used by typeflow for " +
          (cpu_backend::has_onednn ? "float64 products only" : "every matmul and convolution") +
          " (OPENBLAS_CORETYPE=" + (avx512 ? "SkylakeX" : "Haswell") + " selects fast ones)");
  }
#elif defined(TYPEFLOW_HAS_CBLAS)
  m.blas = "CBLAS";
#endif
  return m;
}
#else
    ;
#endif

} // namespace typeflow
