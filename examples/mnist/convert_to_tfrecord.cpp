// Writes Fashion-MNIST (or any MNIST-format IDX directory) as TFRecord files of tf.train.Example
// in the seed's layout (its convert_to_records.py): height, width, depth, label (int64) and
// image_raw (bytes, 784 uint8 pixels), one record per image, in the files' order:
//   OUT/train.tfrecord (or --shards N: OUT/train-00000-of-0000N.tfrecord ...), OUT/test.tfrecord
// Each file is written to a temporary name and renamed when complete.
//   mnist_to_tfrecord --data-dir /usr/share/datasets/fashion-mnist --out-dir DIR [--gzip]
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "typeflow/io/example.hpp"
#include "typeflow/io/idx.hpp"
#include "typeflow/io/tfrecord.hpp"

namespace {

namespace fs = std::filesystem;
namespace io = typeflow::io;

/// Writes images [begin, end) of (images, labels) to `path`.
void write_split(const typeflow::data::idx_u8& images, const typeflow::data::idx_u8& labels,
                 std::int64_t begin, std::int64_t end, const fs::path& path, bool gzip) {
  const std::int64_t rows = images.dims[1], cols = images.dims[2], pixels = rows * cols;
  const fs::path tmp = path.string() + ".tmp";
  {
    io::tfrecord_writer w(tmp.string(),
                          gzip ? io::tfrecord_compression::gzip : io::tfrecord_compression::none);
    for (std::int64_t i = begin; i < end; ++i) {
      const std::string_view raw(reinterpret_cast<const char*>(images.data.data()) + i * pixels,
                                 static_cast<std::size_t>(pixels));
      w.write(io::example_builder()
                  .add_int64("height", rows)
                  .add_int64("width", cols)
                  .add_int64("depth", 1)
                  .add_int64("label", labels.data[static_cast<std::size_t>(i)])
                  .add_bytes("image_raw", raw)
                  .str());
    }
    w.close(true);
  }
  fs::rename(tmp, path);
  std::printf("wrote %lld records to %s\n", static_cast<long long>(end - begin), path.c_str());
}

void convert(const std::string& data_dir, const std::string& idx_prefix, const fs::path& out_dir,
             const std::string& split, int shards, std::int64_t limit, bool gzip) {
  const auto pick = [&](const std::string& name) {
    return typeflow::data::detail::mnist_pick(data_dir, idx_prefix + name);
  };
  const auto images = typeflow::data::read_idx_u8(pick("-images-idx3-ubyte"), 3);
  const auto labels = typeflow::data::read_idx_u8(pick("-labels-idx1-ubyte"), 1);
  if (images.dims[0] != labels.dims[0])
    throw typeflow::error("mnist_to_tfrecord: " + std::to_string(images.dims[0]) + " images but " +
                          std::to_string(labels.dims[0]) + " labels in " + data_dir);
  std::int64_t n = images.dims[0];
  if (limit > 0 && limit < n)
    n = limit;
  const std::string ext = gzip ? ".tfrecord.gz" : ".tfrecord";
  if (shards <= 1) {
    write_split(images, labels, 0, n, out_dir / (split + ext), gzip);
    return;
  }
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d%s", split.c_str(), s, shards, ext.c_str());
    write_split(images, labels, n * s / shards, n * (s + 1) / shards, out_dir / name, gzip);
  }
}

} // namespace

int main(int argc, char** argv) try {
  std::string data_dir = "/usr/share/datasets/fashion-mnist", out_dir;
  int shards = 1;
  std::int64_t limit = 0;
  bool gzip = false;
  CLI::App app("Writes MNIST-format data as TFRecord files in the seed's layout.",
               "mnist_to_tfrecord");
  app.add_option("--data-dir", data_dir, "directory of MNIST-format (IDX) files")
      ->capture_default_str();
  app.add_option("--out-dir", out_dir, "where train*.tfrecord and test.tfrecord go")->required();
  app.add_option("--shards", shards, "split the training set over N files")
      ->check(CLI::PositiveNumber);
  app.add_option("--limit", limit, "only the first N training images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--gzip", gzip, "GZIP-compressed records (TFRecordOptions GZIP)");
  CLI11_PARSE(app, argc, argv);
  fs::create_directories(out_dir);
  convert(data_dir, "train", out_dir, "train", shards, limit, gzip);
  convert(data_dir, "t10k", out_dir, "test", 1, 0, gzip);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mnist_to_tfrecord: %s\n", e.what());
  return 1;
}
