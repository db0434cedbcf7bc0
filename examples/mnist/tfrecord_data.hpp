// The main job's TFRecord input, in the seed's layout (convert_to_records.py / read_and_decode):
// each record a tf.train.Example with image_raw (bytes: 784 uint8 pixels) and label (int64),
// plus height, width and depth (int64), which the reader ignores as the seed's did.
//   DIR/train.tfrecord or the shards DIR/train-*.tfrecord, and DIR/test.tfrecord (a file ending
//   in .gz is read as GZIP).
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "typeflow/io/example.hpp"
#include "typeflow/io/idx.hpp"
#include "typeflow/io/input_queue.hpp"
#include "typeflow/io/tfrecord.hpp"

namespace mnist {

/// One decoded example: 784 preprocessed pixels (p * (1. / 255) - 0.5) and its label.
struct example {
  std::vector<float> pixels;
  std::int32_t label = 0;
};

inline typeflow::io::tfrecord_compression compression_of(const std::string& path) {
  return path.size() > 3 && path.ends_with(".gz") ? typeflow::io::tfrecord_compression::gzip
                                                  : typeflow::io::tfrecord_compression::none;
}

/// `split`.tfrecord[.gz] in dir, or else its shards `split`-*.tfrecord[.gz], sorted.
inline std::vector<std::string> tfrecord_files(const std::string& dir, const std::string& split) {
  namespace fs = std::filesystem;
  for (const char* ext : {".tfrecord", ".tfrecord.gz"})
    if (fs::exists(fs::path(dir) / (split + ext)))
      return {(fs::path(dir) / (split + ext)).string()};
  std::vector<std::string> shards;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(split + "-") &&
        (name.ends_with(".tfrecord") || name.ends_with(".tfrecord.gz")))
      shards.push_back(e.path().string());
  }
  if (ec)
    throw typeflow::error("mnist: " + dir + ": " + ec.message());
  if (shards.empty())
    throw typeflow::error("mnist: " + dir + ": neither " + split + ".tfrecord nor shards " + split +
                          "-*.tfrecord exist");
  std::sort(shards.begin(), shards.end());
  return shards;
}

/// The seed's read_and_decode: the Example's image_raw as 784 uint8 pixels, scaled, and label.
inline example decode(std::string_view record, std::string_view where) {
  namespace io = typeflow::io;
  auto [raw, label] =
      io::parse_example<io::fixed_len<"image_raw", io::bytes, typeflow::shape<>>,
                        io::fixed_len<"label", std::int64_t, typeflow::shape<>>>(record, where);
  if (raw.size() != 28 * 28)
    throw typeflow::error("mnist: " + std::string(where) + ": image_raw has " +
                          std::to_string(raw.size()) + " bytes, expected 784 (28 x 28)");
  const std::int64_t l = label.item();
  if (l < 0 || l > 9)
    throw typeflow::error("mnist: " + std::string(where) + ": label " + std::to_string(l) +
                          " is not 0..9");
  example e;
  e.pixels.resize(784);
  typeflow::data::preprocess_pixels(reinterpret_cast<const std::uint8_t*>(raw.data()),
                                    e.pixels.data(), 784);
  e.label = static_cast<std::int32_t>(l);
  return e;
}

/// Every record of `files`, decoded, in order (the test split, held in memory for evaluation).
inline typeflow::data::mnist_split load_tfrecord_split(const std::vector<std::string>& files) {
  typeflow::data::mnist_split s;
  s.rows = s.cols = 28;
  std::string rec;
  for (const auto& f : files) {
    typeflow::io::tfrecord_reader r(f, compression_of(f));
    while (r.next(rec)) {
      const example e = decode(rec, "record " + std::to_string(r.records() - 1) + " of " + f);
      s.images.insert(s.images.end(), e.pixels.begin(), e.pixels.end());
      s.labels.push_back(e.label);
      ++s.count;
    }
  }
  return s;
}

/// Records in `files` (a pass that checks every CRC, without decoding).
inline std::int64_t count_records(const std::vector<std::string>& files) {
  std::int64_t n = 0;
  std::string rec;
  for (const auto& f : files) {
    typeflow::io::tfrecord_reader r(f, compression_of(f));
    while (r.next(rec))
      ++n;
  }
  return n;
}

} // namespace mnist
