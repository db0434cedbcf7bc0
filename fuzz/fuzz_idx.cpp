// libFuzzer target: the IDX reader (plain and gzip) on arbitrary bytes. It may only return an
// array that matches its header or throw typeflow::error; anything else (a crash, a sanitizer
// report, another exception, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "../include/typeflow/io/idx.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  typeflow::fuzz::memory_file f(data, size);
  try {
    const auto a = typeflow::data::read_idx(f.path());
    std::uint64_t n = 1;
    for (auto d : a.dims)
      n *= static_cast<std::uint64_t>(d);
    if (a.bytes.size() != n * typeflow::data::idx_element_size(a.type_code))
      std::abort(); // returned data that does not match its header
  } catch (const typeflow::error&) {
  }
  return 0;
}
