// libFuzzer target: the safetensors JSON header parser alone (nlohmann's SAX parser under
// typeflow's builder, which rejects duplicate keys, NUL bytes and byte-order marks) on
// arbitrary text. It may only return a value or throw typeflow::error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../include/typeflow/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string header(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> keys;
  try {
    (void)typeflow::io::detail::parse_header(header, "fuzz: ", keys);
  } catch (const typeflow::error&) {
  }
  return 0;
}
