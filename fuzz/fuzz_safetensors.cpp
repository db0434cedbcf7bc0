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
      // each dtype's element size, written out here rather than read from the reader's table
      const auto& dt = t.dtype;
      std::uint64_t n = 0;
      if (dt == "float64" || dt == "int64")
        n = 8;
      else if (dt == "float32" || dt == "int32")
        n = 4;
      else if (dt == "float16" || dt == "bfloat16")
        n = 2;
      else if (dt == "bool")
        n = 1;
      else
        std::abort(); // a dtype the reader should have rejected
      for (auto e : t.shape)
        n *= static_cast<std::uint64_t>(e);
      if (t.bytes.size() != n)
        std::abort(); // a tensor whose bytes do not fit its shape
    }
  } catch (const typeflow::error&) {
  }
  return 0;
}
