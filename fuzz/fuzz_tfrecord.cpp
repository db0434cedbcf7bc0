// libFuzzer target: the TFRecord reader and the tf.train.Example decoder on arbitrary bytes. The
// first byte picks the compression (none, GZIP, ZLIB), the rest is the file. Every record read
// is decoded as an Example and each feature's values listed; the only allowed failure is a
// typeflow::error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../include/typeflow/io/example.hpp"
#include "../include/typeflow/io/tfrecord.hpp"
#include "fuzz_input.hpp"

namespace io = typeflow::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const auto c = static_cast<io::tfrecord_compression>(data[0] % 3);
  typeflow::fuzz::memory_file f(data + 1, size - 1);
  try {
    io::tfrecord_reader r(f.path(), c);
    std::string rec;
    std::vector<float> floats;
    std::vector<std::int64_t> ints;
    while (r.next(rec)) {
      try {
        const io::example_view ex(rec);
        for (const auto& feat : ex.features()) {
          if (feat.kind == io::feature_kind::bytes)
            io::for_each_bytes(feat.list, [](std::string_view) {});
          else if (feat.kind == io::feature_kind::floats)
            io::append_values(feat.list, floats);
          else if (feat.kind == io::feature_kind::int64s)
            io::append_values(feat.list, ints);
        }
        (void)io::parse_example<io::fixed_len<"label", std::int64_t, typeflow::shape<>, 0>,
                                io::var_len<"image_raw", io::bytes>, io::var_len<"x", float>>(
            rec, "fuzz");
      } catch (const typeflow::error&) {
      }
      floats.clear();
      ints.clear();
    }
  } catch (const typeflow::error&) {
  }
  return 0;
}
