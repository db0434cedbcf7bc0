// Data input: IDX files (plain and gzip) read back exactly, every kind of corruption throws
// typeflow::error naming the file and the byte offset, MNIST loading and preprocessing, and the
// shuffling, prefetching batcher (each example once per epoch, seeded order, clean shutdown).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <typeflow/io/batch.hpp>
#include <typeflow/io/idx.hpp>
#include <vector>

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
#include <zlib.h>
#endif

namespace fs = std::filesystem;
namespace td = typeflow::data;

namespace {

using bytes = std::vector<std::uint8_t>;

/// A fresh directory under the system temp directory, removed with its contents at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<unsigned> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path = fs::temp_directory_path() /
           ("typeflow_test_data_" + std::to_string(std::random_device{}()) + "_" +
            std::to_string(stamp) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void put_be(bytes& out, std::uint64_t v, std::size_t n) {
  for (std::size_t i = n; i-- > 0;)
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

bytes idx_header(std::uint8_t type, const std::vector<std::uint32_t>& dims) {
  bytes out{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    put_be(out, d, 4);
  return out;
}

bytes idx_u8_file(const std::vector<std::uint32_t>& dims, const bytes& data) {
  bytes out = idx_header(0x08, dims);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

/// Deterministic, poorly compressible bytes.
bytes noise(std::size_t n, std::uint32_t seed = 1) {
  bytes out(n);
  std::uint32_t s = seed;
  for (auto& b : out) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(s >> 24);
  }
  return out;
}

void write_file(const std::string& path, const bytes& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  REQUIRE(f.good());
}

[[maybe_unused]] bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
void write_gz(const std::string& path, const bytes& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!data.empty())
    REQUIRE(gzwrite(f, data.data(), static_cast<unsigned>(data.size())) ==
            static_cast<int>(data.size()));
  REQUIRE(gzclose(f) == Z_OK);
}
#endif

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// Runs f, which must throw typeflow::error; returns the message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const typeflow::error& e) {
    return e.what();
  }
  FAIL("no typeflow::error was thrown");
  return {};
}

/// read_idx on `path` must throw an error naming the file, "offset" and `part`.
void check_idx_error(const std::string& path, const std::string& part) {
  const std::string msg = error_of([&] { (void)td::read_idx(path); });
  INFO(msg);
  CHECK(contains(msg, "typeflow: idx: "));
  CHECK(contains(msg, path));
  CHECK(contains(msg, "offset"));
  CHECK(contains(msg, part));
}

template <class T, class U>
bytes encode_be(const std::vector<T>& values) {
  bytes out;
  for (T v : values)
    put_be(out, static_cast<std::uint64_t>(std::bit_cast<U>(v)), sizeof(T));
  return out;
}

template <class T>
std::vector<T> decode_host(const td::idx_array& a) {
  REQUIRE(a.bytes.size() % sizeof(T) == 0);
  std::vector<T> out(a.bytes.size() / sizeof(T));
  std::memcpy(out.data(), a.bytes.data(), a.bytes.size());
  return out;
}

/// Writes header + payload for every element type and checks read_idx returns it.
template <class T, class U>
void check_type_roundtrip(const temp_dir& dir, std::uint8_t code, const std::vector<T>& values,
                          bool gz) {
  const std::vector<std::uint32_t> dims{2, static_cast<std::uint32_t>(values.size() / 2)};
  bytes file = idx_header(code, dims);
  const bytes payload = encode_be<T, U>(values);
  file.insert(file.end(), payload.begin(), payload.end());
  // Compression is detected by content, not by name: the names are deliberately misleading.
  const std::string path = dir.file("type_" + std::to_string(code) + (gz ? ".idx" : ".idx.gz"));
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  if (gz)
    write_gz(path, file);
  else
#endif
    write_file(path, file);
  const td::idx_array a = td::read_idx(path);
  CHECK(a.type_code == code);
  CHECK(a.dims == std::vector<std::int64_t>{2, static_cast<std::int64_t>(values.size() / 2)});
  const std::vector<T> got = decode_host<T>(a);
  REQUIRE(got.size() == values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    CHECK(std::bit_cast<U>(got[i]) == std::bit_cast<U>(values[i]));
}

void check_all_types(const temp_dir& dir, bool gz) {
  check_type_roundtrip<std::uint8_t, std::uint8_t>(dir, 0x08, {0, 1, 127, 128, 254, 255}, gz);
  check_type_roundtrip<std::int8_t, std::uint8_t>(dir, 0x09, {-128, -1, 0, 1, 100, 127}, gz);
  check_type_roundtrip<std::int16_t, std::uint16_t>(dir, 0x0B, {-32768, -2, 0, 258, 4660, 32767},
                                                    gz);
  check_type_roundtrip<std::int32_t, std::uint32_t>(dir, 0x0C,
                                                    {std::numeric_limits<std::int32_t>::min(), -3,
                                                     0, 0x01020304, 77,
                                                     std::numeric_limits<std::int32_t>::max()},
                                                    gz);
  check_type_roundtrip<float, std::uint32_t>(
      dir, 0x0D, {1.5f, -0.25f, 3.4e38f, std::numeric_limits<float>::denorm_min(), 0.0f, -7.0f},
      gz);
  check_type_roundtrip<double, std::uint64_t>(
      dir, 0x0E, {1.0 / 3.0, -2.5, 1e300, std::numeric_limits<double>::denorm_min(), 0.0, 42.0},
      gz);
}

} // namespace

// ---------------------------------------------------------------------------------------------
// IDX: reading back
// ---------------------------------------------------------------------------------------------

TEST_CASE("read_idx: every element type round-trips from a plain file (big-endian -> host)") {
  temp_dir dir;
  check_all_types(dir, false);
}

TEST_CASE("read_idx_u8: dims and values of a rank-3 file, extents of 0 are legal") {
  temp_dir dir;
  const bytes data = noise(2 * 3 * 4);
  const std::string path = dir.file("images-idx3-ubyte");
  write_file(path, idx_u8_file({2, 3, 4}, data));
  const td::idx_u8 a = td::read_idx_u8(path, 3);
  CHECK(a.dims == std::vector<std::int64_t>{2, 3, 4});
  CHECK(a.data == data);

  const std::string empty = dir.file("empty-idx3-ubyte");
  write_file(empty, idx_u8_file({0, 28, 28}, {}));
  const td::idx_u8 e = td::read_idx_u8(empty, 3);
  CHECK(e.dims == std::vector<std::int64_t>{0, 28, 28});
  CHECK(e.data.empty());

  // A zero extent makes the total 0 even when the other extents' product would overflow.
  const std::string huge_zero = dir.file("huge_zero");
  write_file(huge_zero, idx_header(0x0E, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0}));
  const td::idx_array z = td::read_idx(huge_zero);
  CHECK(z.dims.size() == 4);
  CHECK(z.bytes.empty());
}

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB

TEST_CASE("read_idx: every element type round-trips from a gzip file (detected by magic bytes)") {
  temp_dir dir;
  check_all_types(dir, true);
}

TEST_CASE("read_idx_u8: a larger gzip file and concatenated gzip members") {
  temp_dir dir;
  const bytes data = noise(100 * 28 * 28, 7);
  const bytes file = idx_u8_file({100, 28, 28}, data);
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  write_gz(path, file);
  const td::idx_u8 a = td::read_idx_u8(path, 3);
  CHECK(a.dims == std::vector<std::int64_t>{100, 28, 28});
  CHECK(a.data == data);

  // RFC 1952: a gzip file may consist of several members; their contents are concatenated.
  const std::string p1 = dir.file("part1.gz"), p2 = dir.file("part2.gz");
  write_gz(p1, bytes(file.begin(), file.begin() + 5000));
  write_gz(p2, bytes(file.begin() + 5000, file.end()));
  bytes both = read_file(p1);
  const bytes second = read_file(p2);
  both.insert(both.end(), second.begin(), second.end());
  const std::string multi = dir.file("multi.gz");
  write_file(multi, both);
  CHECK(td::read_idx_u8(multi, 3).data == data);
}

#endif

// ---------------------------------------------------------------------------------------------
// IDX: errors
// ---------------------------------------------------------------------------------------------

TEST_CASE("read_idx: malformed plain files throw, naming the file and the byte offset") {
  temp_dir dir;
  const bytes data = noise(2 * 3 * 4);
  const bytes good = idx_u8_file({2, 3, 4}, data);

  SUBCASE("bad magic") {
    bytes f = good;
    f[1] = 0x01;
    const std::string p = dir.file("bad_magic");
    write_file(p, f);
    check_idx_error(p, "bad magic at byte offset 0");
  }
  SUBCASE("unknown type code") {
    bytes f = good;
    f[2] = 0x0A;
    const std::string p = dir.file("bad_type");
    write_file(p, f);
    check_idx_error(p, "unknown type code 0x0A at byte offset 2");
  }
  SUBCASE("wrong type code for read_idx_u8") {
    bytes f = idx_header(0x0D, {2});
    put_be(f, 0, 8);
    const std::string p = dir.file("float_not_u8");
    write_file(p, f);
    CHECK(td::read_idx(p).type_code == 0x0D); // fine for read_idx
    const std::string msg = error_of([&] { (void)td::read_idx_u8(p, 1); });
    CHECK(contains(msg, p));
    CHECK(contains(msg, "type code 0x0D (float) at byte offset 2, expected 0x08"));
  }
  SUBCASE("rank 0 and rank > 8") {
    const std::string p0 = dir.file("rank0");
    write_file(p0, bytes{0, 0, 0x08, 0});
    check_idx_error(p0, "invalid rank 0 at byte offset 3");
    bytes f9 = idx_header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1});
    f9.push_back(0);
    const std::string p9 = dir.file("rank9");
    write_file(p9, f9);
    check_idx_error(p9, "invalid rank 9 at byte offset 3");
  }
  SUBCASE("not the expected rank") {
    const std::string p = dir.file("rank3");
    write_file(p, good);
    const std::string msg = error_of([&] { (void)td::read_idx_u8(p, 1); });
    CHECK(contains(msg, p));
    CHECK(contains(msg, "rank 3 at byte offset 3, expected 1"));
    CHECK_THROWS_AS((void)td::read_idx_u8(p, 0), typeflow::error);
  }
  SUBCASE("truncated header") {
    const std::string p_empty = dir.file("empty_file");
    write_file(p_empty, {});
    check_idx_error(p_empty, "truncated header at byte offset 0");
    const std::string p3 = dir.file("three_bytes");
    write_file(p3, bytes{0, 0, 0x08});
    check_idx_error(p3, "truncated header at byte offset 3");
    const std::string p = dir.file("short_extents");
    write_file(p, bytes(good.begin(), good.begin() + 10)); // 4 + 6 of 12 extent bytes
    check_idx_error(p, "truncated header at byte offset 10: expected 3 extents (12 bytes), got 6");
  }
  SUBCASE("truncated data") {
    const std::string p = dir.file("short_data");
    write_file(p, bytes(good.begin(), good.end() - 5));
    check_idx_error(p, "truncated data at byte offset 16: expected 24 bytes of data, got 19");
  }
  SUBCASE("trailing bytes") {
    bytes f = good;
    f.push_back(0);
    f.push_back(1);
    const std::string p = dir.file("trailing");
    write_file(p, f);
    check_idx_error(p, "trailing bytes at byte offset 40: 2 bytes follow");
  }
  SUBCASE("total size overflow") {
    const std::string p = dir.file("overflow");
    write_file(p, idx_header(0x0E, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}));
    check_idx_error(p, "total size overflow at byte offset 4");
  }
  SUBCASE("huge declared size with little data is truncated, not an allocation failure") {
    bytes f = idx_header(0x08, {0xFFFFFFFFu, 0x10000u});
    f.push_back(1);
    const std::string p = dir.file("huge");
    write_file(p, f);
    check_idx_error(p, "expected 281474976645120 bytes of data, got 1");
  }
  SUBCASE("nonexistent file and directory") {
    const std::string p = dir.file("does-not-exist-idx1-ubyte");
    const std::string msg = error_of([&] { (void)td::read_idx(p); });
    CHECK(contains(msg, p));
    CHECK(contains(msg, "cannot open"));
    const std::string msg_dir = error_of([&] { (void)td::read_idx(dir.path.string()); });
    CHECK(contains(msg_dir, dir.path.string()));
    CHECK(contains(msg_dir, "directory"));
  }
  SUBCASE("a FIFO with no writer is refused at once, not waited on") {
    const std::string p = dir.file("fifo-idx3-ubyte");
    REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
    auto pending =
        std::async(std::launch::async, [&] { return error_of([&] { (void)td::read_idx(p); }); });
    REQUIRE(pending.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const std::string msg = pending.get();
    CHECK(contains(msg, p));
    CHECK(contains(msg, "not a regular file"));
  }
}

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB

TEST_CASE("read_idx: corrupt gzip files throw, never return short data") {
  temp_dir dir;
  const bytes data = noise(20000, 3);
  const bytes good = idx_u8_file({20000}, data);
  const std::string good_path = dir.file("good.gz");
  write_gz(good_path, good);
  const bytes gz = read_file(good_path);
  REQUIRE(gz.size() > 1000);
  CHECK(td::read_idx_u8(good_path, 1).data == data);

  SUBCASE("cut in half") {
    const std::string p = dir.file("half-idx1-ubyte.gz");
    write_file(p, bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
    check_idx_error(p, "truncated gzip stream at compressed byte offset");
  }
  SUBCASE("only the 8-byte trailer (CRC, length) missing") {
    const std::string p = dir.file("no_trailer.gz");
    write_file(p, bytes(gz.begin(), gz.end() - 8));
    check_idx_error(p, "truncated gzip stream");
  }
  SUBCASE("bytes flipped in the middle") {
    bytes f = gz;
    for (std::size_t i = f.size() / 2; i < f.size() / 2 + 4; ++i)
      f[i] = static_cast<std::uint8_t>(~f[i]);
    const std::string p = dir.file("flipped.gz");
    write_file(p, f);
    check_idx_error(p, "offset");
  }
  SUBCASE("CRC mismatch") {
    bytes f = gz;
    f[f.size() - 8] ^= 0x01; // first byte of the CRC32
    const std::string p = dir.file("bad_crc.gz");
    write_file(p, f);
    check_idx_error(p, "corrupt gzip stream");
  }
  SUBCASE("garbage after the gzip stream") {
    bytes f = gz;
    f.push_back(0x42);
    f.push_back(0x43);
    const std::string p = dir.file("garbage_after.gz");
    write_file(p, f);
    check_idx_error(p, "unexpected bytes after the end of the gzip stream at compressed byte "
                       "offset " +
                           std::to_string(gz.size()));
    bytes one = gz;
    one.push_back(0x1f);
    const std::string p1 = dir.file("one_byte_after.gz");
    write_file(p1, one);
    check_idx_error(p1, "unexpected bytes after the end of the gzip stream");
  }
  SUBCASE("just the gzip magic") {
    const std::string p = dir.file("magic_only.gz");
    write_file(p, bytes{0x1f, 0x8b});
    check_idx_error(p, "truncated gzip stream");
  }
  SUBCASE("valid gzip of a truncated IDX file") {
    const std::string p = dir.file("short_payload.gz");
    write_gz(p, bytes(good.begin(), good.end() - 1));
    check_idx_error(p, "truncated data at byte offset 8 of the decompressed data: expected 20000 "
                       "bytes of data, got 19999");
  }
  SUBCASE("valid gzip of an IDX file with trailing bytes") {
    bytes f = good;
    f.push_back(9);
    const std::string p = dir.file("trailing_payload.gz");
    write_gz(p, f);
    check_idx_error(p, "trailing bytes at byte offset 20008");
  }
}

#else

TEST_CASE("read_idx: without zlib a gzip file gives a clear error") {
  temp_dir dir;
  const std::string p = dir.file("x.gz");
  write_file(p, bytes{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3});
  const std::string msg = error_of([&] { (void)td::read_idx(p); });
  CHECK(contains(msg, p));
  CHECK(contains(msg, "zlib support is not compiled in"));
}

#endif

// ---------------------------------------------------------------------------------------------
// MNIST loading and preprocessing
// ---------------------------------------------------------------------------------------------

TEST_CASE("preprocess_pixels: p -> p * (1. / 255) - 0.5 (the seed's read_and_decode)") {
  bytes in(256);
  for (int i = 0; i < 256; ++i)
    in[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
  std::vector<float> out(256);
  td::preprocess_pixels(in.data(), out.data(), in.size());
  for (int i = 0; i < 256; ++i) {
    const double expected = static_cast<double>(i) / 255.0 - 0.5; // float32 within 1.2e-7
    CHECK(static_cast<double>(out[static_cast<std::size_t>(i)]) ==
          doctest::Approx(expected).scale(1).epsilon(1.2e-7));
  }
  CHECK(out[0] == -0.5f);
  CHECK(out[255] == 0.5f); // float(1/255) * 255 rounds to 1 in float32
  CHECK(out[128] > 0.0f);
  CHECK(out[127] < 0.0f);
}

TEST_CASE("load_mnist: synthetic split, file choice and validation") {
  temp_dir dir;
  const std::string d = dir.path.string();
  const bytes pixels{0, 255, 128, 64, 1, 2, 3, 4, 10, 20, 30, 40};
  write_file(dir.file("train-images-idx3-ubyte"), idx_u8_file({3, 2, 2}, pixels));
  write_file(dir.file("train-labels-idx1-ubyte"), idx_u8_file({3}, {9, 0, 4}));
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  // A .gz next to the plain file is ignored: the uncompressed file is preferred.
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_u8_file({1, 2, 2}, {1, 2, 3, 4}));
#endif

  const td::mnist_split s = td::load_mnist(d, true);
  CHECK(s.count == 3);
  CHECK(s.rows == 2);
  CHECK(s.cols == 2);
  CHECK(s.labels == std::vector<std::int32_t>{9, 0, 4});
  REQUIRE(s.images.size() == 12);
  for (std::size_t i = 0; i < pixels.size(); ++i)
    CHECK(static_cast<double>(s.images[i]) ==
          doctest::Approx(pixels[i] / 255.0 - 0.5).scale(1).epsilon(1.2e-7));

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  SUBCASE("only .gz files") {
    write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_u8_file({2, 1, 3}, {0, 1, 2, 3, 4, 5}));
    write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_u8_file({2}, {1, 2}));
    const td::mnist_split t = td::load_mnist(d, false);
    CHECK(t.count == 2);
    CHECK(t.rows == 1);
    CHECK(t.cols == 3);
    CHECK(t.labels == std::vector<std::int32_t>{1, 2});
    CHECK(static_cast<double>(t.images[5]) ==
          doctest::Approx(5 / 255.0 - 0.5).scale(1).epsilon(1.2e-7));
  }
#endif
  SUBCASE("missing files") {
    const std::string msg = error_of([&] { (void)td::load_mnist(d, false); });
    CHECK(contains(msg, d));
    CHECK(contains(msg, "t10k-images-idx3-ubyte"));
    CHECK(contains(msg, "t10k-images-idx3-ubyte.gz"));
  }
  SUBCASE("image count != label count") {
    const std::string lbl = dir.file("train-labels-idx1-ubyte");
    write_file(lbl, idx_u8_file({2}, {1, 2}));
    const std::string msg = error_of([&] { (void)td::load_mnist(d, true); });
    CHECK(contains(msg, lbl));
    CHECK(contains(msg, dir.file("train-images-idx3-ubyte")));
    CHECK(contains(msg, "image count 3"));
    CHECK(contains(msg, "label count 2"));
  }
  SUBCASE("label >= 10") {
    const std::string lbl = dir.file("train-labels-idx1-ubyte");
    write_file(lbl, idx_u8_file({3}, {1, 10, 2}));
    const std::string msg = error_of([&] { (void)td::load_mnist(d, true); });
    CHECK(contains(msg, lbl));
    CHECK(contains(msg, "label 10 at index 1"));
    CHECK(contains(msg, "offset 9"));
  }
  SUBCASE("labels of the wrong rank") {
    const std::string lbl = dir.file("train-labels-idx1-ubyte");
    write_file(lbl, idx_u8_file({3, 1}, {1, 2, 3}));
    const std::string msg = error_of([&] { (void)td::load_mnist(d, true); });
    CHECK(contains(msg, lbl));
    CHECK(contains(msg, "rank 2 at byte offset 3, expected 1"));
  }
}

namespace {
constexpr const char* fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
constexpr bool built_with_zlib =
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
    true;
#else
    false;
#endif
} // namespace

// Skipped, and counted as skipped in doctest's summary, where the dataset or zlib is missing
// (CI installs both, so there it runs).
TEST_CASE("load_mnist: the real Fashion-MNIST test split, if installed" *
          doctest::skip(!built_with_zlib ||
                        !fs::exists(fs::path(fashion_mnist_dir) / "t10k-labels-idx1-ubyte.gz"))) {
  const std::string d = fashion_mnist_dir;
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  const td::mnist_split s = td::load_mnist(d, false);
  CHECK(s.count == 10000);
  CHECK(s.rows == 28);
  CHECK(s.cols == 28);
  CHECK(s.images.size() == 10000u * 28u * 28u);
  REQUIRE(s.labels.size() == 10000u);
  std::vector<int> per_class(10, 0);
  for (auto l : s.labels)
    ++per_class[static_cast<std::size_t>(l)];
  for (int c = 0; c < 10; ++c)
    CHECK(per_class[static_cast<std::size_t>(c)] == 1000);
  const auto [lo, hi] = std::minmax_element(s.images.begin(), s.images.end());
  CHECK(*lo >= -0.5f);
  CHECK(*hi <= 0.5f); // 255 -> exactly 0.5
#endif
}

// ---------------------------------------------------------------------------------------------
// Batcher
// ---------------------------------------------------------------------------------------------

namespace {

constexpr std::int64_t ex_size = 3;

/// count examples; example i has label i and pixels 10*i, 10*i+1, 10*i+2.
td::batcher make_batcher(std::int64_t count, td::batcher_options o) {
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  for (std::int64_t i = 0; i < count; ++i) {
    labels.push_back(static_cast<std::int32_t>(i));
    for (std::int64_t k = 0; k < ex_size; ++k)
      images.push_back(static_cast<float>(10 * i + k));
  }
  return td::batcher(std::move(images), std::move(labels), ex_size, std::move(o));
}

/// The labels of one whole epoch, checking batch sizes, indices and image/label pairing.
std::vector<std::int32_t> take_epoch(td::batcher& b, std::int64_t count, std::int64_t batch_size,
                                     bool drop_last, std::int64_t epoch) {
  std::vector<std::int32_t> seen;
  const std::int64_t full = count / batch_size, rest = count % batch_size;
  const std::int64_t n = drop_last ? full : full + (rest ? 1 : 0);
  CHECK(b.batches_per_epoch() == n);
  for (std::int64_t i = 0; i < n; ++i) {
    const td::batch bt = b.next();
    CHECK(bt.epoch == epoch);
    CHECK(bt.index_in_epoch == i);
    const std::int64_t want = (i == full) ? rest : batch_size;
    CHECK(bt.size == want);
    REQUIRE(bt.labels.size() == static_cast<std::size_t>(bt.size));
    REQUIRE(bt.images.size() == static_cast<std::size_t>(bt.size * ex_size));
    for (std::size_t k = 0; k < bt.labels.size(); ++k) {
      for (std::size_t j = 0; j < static_cast<std::size_t>(ex_size); ++j)
        CHECK(bt.images[k * ex_size + j] == static_cast<float>(10 * bt.labels[k]) + j);
      seen.push_back(bt.labels[k]);
    }
  }
  return seen;
}

} // namespace

TEST_CASE("batcher: every example exactly once per epoch, last batch kept or dropped") {
  const std::int64_t count = 10;
  for (std::int64_t bs : {1, 2, 3, 4, 5, 10, 11}) {
    for (bool drop_last : {false, true}) {
      for (bool shuffle : {true, false}) {
        if (drop_last && bs > count)
          continue;
        CAPTURE(bs);
        CAPTURE(drop_last);
        CAPTURE(shuffle);
        td::batcher b = make_batcher(count, {bs, shuffle, 42, drop_last, 2, {}});
        CHECK(b.examples() == count);
        for (std::int64_t e = 0; e < 3; ++e) {
          const std::vector<std::int32_t> seen = take_epoch(b, count, bs, drop_last, e);
          const std::set<std::int32_t> unique(seen.begin(), seen.end());
          CHECK(unique.size() == seen.size());
          CHECK(static_cast<std::int64_t>(seen.size()) == (drop_last ? count / bs * bs : count));
          if (!drop_last) {
            CHECK(*unique.begin() == 0);
            CHECK(*unique.rbegin() == count - 1);
          }
          if (!shuffle) // original order, last partial batch dropped
            for (std::size_t i = 0; i < seen.size(); ++i)
              CHECK(seen[i] == static_cast<std::int32_t>(i));
        }
      }
    }
  }
}

TEST_CASE("batcher: the order is a function of (seed, epoch)") {
  const std::int64_t count = 50, bs = 7;
  auto epochs = [&](std::uint64_t seed, std::size_t prefetch) {
    td::batcher b = make_batcher(count, {bs, true, seed, false, prefetch, {}});
    std::vector<std::vector<std::int32_t>> out;
    for (std::int64_t e = 0; e < 3; ++e)
      out.push_back(take_epoch(b, count, bs, false, e));
    return out;
  };
  const auto a = epochs(123, 2), a2 = epochs(123, 0), a3 = epochs(123, 5), c = epochs(124, 2);
  CHECK(a == a2); // prefetch depth does not change the order
  CHECK(a == a3);
  CHECK(a != c);
  CHECK(a[0] != c[0]);
  CHECK(a[0] != a[1]); // successive epochs are shuffled differently
  CHECK(a[1] != a[2]);
  for (std::int64_t e = 0; e < 3; ++e) {
    const auto p = td::batcher::permutation(count, 123, e);
    for (std::size_t i = 0; i < p.size(); ++i)
      CHECK(a[static_cast<std::size_t>(e)][i] == p[i]);
  }
  // Not the identity.
  std::vector<std::int32_t> identity(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < identity.size(); ++i)
    identity[i] = static_cast<std::int32_t>(i);
  CHECK(a[0] != identity);
}

TEST_CASE("batcher: destroying it mid-epoch or before the first batch does not hang") {
  for (std::size_t prefetch : {0, 1, 2, 8}) {
    {
      td::batcher b = make_batcher(1000, {16, true, 1, false, prefetch, {}});
      (void)b.next();
      (void)b.next();
    }
    { td::batcher b = make_batcher(1000, {16, true, 1, false, prefetch, {}}); }
  }
  // The caller's vectors may go away: the batcher owns its copy.
  std::unique_ptr<td::batcher> b;
  {
    std::vector<float> images{1, 2, 3, 4};
    std::vector<std::int32_t> labels{5, 6};
    b = std::make_unique<td::batcher>(images, labels, 2, td::batcher_options{2, false});
  }
  const td::batch bt = b->next();
  CHECK(bt.images == std::vector<float>{1, 2, 3, 4});
  CHECK(bt.labels == std::vector<std::int32_t>{5, 6});
}

TEST_CASE("batcher: an exception on the background thread is rethrown by next()") {
  int calls = 0;
  td::batcher_options o;
  o.batch_size = 2;
  o.on_batch = [&calls](td::batch& bt) {
    if (++calls == 3)
      throw std::runtime_error("augmentation failed");
    bt.labels[0] += 100;
  };
  td::batcher b = make_batcher(10, std::move(o));
  CHECK(b.next().labels[0] >= 100);
  CHECK(b.next().labels[0] >= 100);
  CHECK_THROWS_WITH_AS(b.next(), "augmentation failed", std::runtime_error);
  CHECK_THROWS_AS(b.next(), std::runtime_error); // and stays failed
}

TEST_CASE("batcher: invalid arguments throw typeflow::error") {
  auto make = [](std::size_t n_images, std::size_t n_labels, std::int64_t example_size,
                 td::batcher_options o) {
    td::batcher b(std::vector<float>(n_images), std::vector<std::int32_t>(n_labels), example_size,
                  std::move(o));
  };
  CHECK_NOTHROW(make(6, 3, 2, {3, true, 0, true, 2, {}}));
  CHECK_THROWS_AS(make(6, 3, 2, {0, true, 0, false, 2, {}}), typeflow::error);  // batch_size 0
  CHECK_THROWS_AS(make(6, 3, 2, {-1, true, 0, false, 2, {}}), typeflow::error); // negative
  CHECK_THROWS_AS(make(6, 3, 0, {1, true, 0, false, 2, {}}), typeflow::error);  // example_size
  CHECK_THROWS_AS(make(7, 3, 2, {1, true, 0, false, 2, {}}), typeflow::error);  // not a multiple
  CHECK_THROWS_AS(make(6, 4, 2, {1, true, 0, false, 2, {}}), typeflow::error);  // count mismatch
  CHECK_THROWS_AS(make(0, 0, 2, {1, true, 0, false, 2, {}}), typeflow::error);  // empty
  const std::string msg = error_of([&] { make(6, 3, 2, {4, true, 0, true, 2, {}}); });
  CHECK(contains(msg, "drop_last"));
  CHECK_NOTHROW(make(6, 3, 2, {4, true, 0, false, 2, {}})); // one partial batch per epoch
}
