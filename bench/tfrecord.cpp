// TFRecord input throughput (single thread, uncompressed records in the seed's MNIST layout,
// the file in the page cache): reading + both CRC-32C checks, + tf.train.Example decoding
// (image_raw bytes and label int64 into typed values), and the baseline: a plain read() of the
// same file in 1 MiB chunks. Bytes are the file's; report the ratios of the same run.
//   build/bench/tfrecord --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <typeflow/io/example.hpp>
#include <typeflow/io/tfrecord.hpp>

namespace {

namespace io = typeflow::io;

/// 20,000 Examples of 784 random pixels and a label (about 16 MB), written once.
const std::string& bench_file() {
  static const std::string path = [] {
    const auto p = (std::filesystem::temp_directory_path() /
                    ("typeflow_bench_" + std::to_string(::getpid()) + ".tfrecord"))
                       .string();
    io::tfrecord_writer w(p);
    std::string img(784, '\0');
    std::uint32_t x = 1;
    for (int k = 0; k < 20000; ++k) {
      for (auto& c : img)
        c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
      w.write(io::example_builder()
                  .add_int64("height", 28)
                  .add_int64("width", 28)
                  .add_int64("depth", 1)
                  .add_int64("label", k % 10)
                  .add_bytes("image_raw", img)
                  .str());
    }
    w.close();
    std::atexit([] { std::filesystem::remove(bench_file()); });
    return p;
  }();
  return path;
}

void set_bytes(benchmark::State& state) {
  const auto bytes = static_cast<std::int64_t>(std::filesystem::file_size(bench_file()));
  state.SetBytesProcessed(state.iterations() * bytes);
}

void plain_read(benchmark::State& state) {
  std::vector<char> buf(std::size_t{1} << 20);
  for (auto _ : state) {
    const int fd = ::open(bench_file().c_str(), O_RDONLY);
    std::size_t total = 0;
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;)
      total += static_cast<std::size_t>(n);
    ::close(fd);
    benchmark::DoNotOptimize(total);
  }
  set_bytes(state);
}
BENCHMARK(plain_read)->Unit(benchmark::kMillisecond);

void records_crc(benchmark::State& state) {
  std::string rec;
  for (auto _ : state) {
    io::tfrecord_reader r(bench_file());
    std::size_t n = 0;
    while (r.next(rec))
      n += rec.size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["crc32c_hw"] = io::crc32c_hardware() ? 1 : 0;
  set_bytes(state);
}
BENCHMARK(records_crc)->Unit(benchmark::kMillisecond);

void records_crc_examples(benchmark::State& state) {
  std::string rec;
  for (auto _ : state) {
    io::tfrecord_reader r(bench_file());
    std::int64_t sum = 0;
    while (r.next(rec)) {
      auto [img, label] =
          io::parse_example<io::fixed_len<"image_raw", io::bytes, typeflow::shape<>>,
                            io::fixed_len<"label", std::int64_t, typeflow::shape<>>>(rec);
      sum += label.item() + static_cast<unsigned char>(img[0]);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state);
}
BENCHMARK(records_crc_examples)->Unit(benchmark::kMillisecond);

} // namespace
