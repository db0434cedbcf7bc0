// libFuzzer target: the safetensors reader (header length, JSON header, offsets, data) on
// arbitrary bytes. It may only return tensors whose bytes match their dtype and shape, or throw
// typeflow::error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "../include/typeflow/io/checkpoint.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  typeflow::fuzz::memory_file f(data, size);
  try {
    std::map<std::string, std::string> meta;
    const auto ts = typeflow::io::read_safetensors(f.path(), &meta);
    for (const auto& t : ts) {
      std::uint64_t n = t.dtype == "float64" || t.dtype == "int64" ? 8 : t.dtype == "bool" ? 1 : 4;
      for (auto d : t.shape)
        n *= static_cast<std::uint64_t>(d);
      if (t.bytes.size() != n)
        std::abort(); // a tensor whose bytes do not fit its shape
    }
  } catch (const typeflow::error&) {
  }
  return 0;
}
