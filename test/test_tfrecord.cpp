// TFRecord and tf.train.Example: CRC-32C against published check values and the table against
// the instruction; round trips (plain, GZIP, ZLIB); files written by real TensorFlow read
// bit-exactly (test/fixtures/make_tfrecord_fixtures.py); every kind of corruption a clear error
// naming file, record and offset, without allocating what a corrupt length claims; the Example
// wire format packed and unpacked, and typed feature specs.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <zlib.h>

#include "typeflow/io/example.hpp"
#include "typeflow/io/input_queue.hpp"
#include "typeflow/io/tfrecord.hpp"

namespace fs = std::filesystem;
namespace io = typeflow::io;
using typeflow::shape;

namespace {

fs::path fixture(const std::string& name) {
  return fs::path(__FILE__).parent_path() / "fixtures" / name;
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("typeflow_test_tfrecord_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& n) const { return (path / n).string(); }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& p, const std::string& data) {
  std::ofstream(p, std::ios::binary) << data;
}

std::vector<std::string> read_all(const std::string& p,
                                  io::tfrecord_compression c = io::tfrecord_compression::none) {
  io::tfrecord_reader r(p, c);
  std::vector<std::string> out;
  std::string rec;
  while (r.next(rec))
    out.push_back(rec);
  return out;
}

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const typeflow::error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("not a typeflow::error: " << e.what());
    return {};
  }
  FAIL_CHECK("did not throw");
  return {};
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// The fixture's record k, as make_tfrecord_fixtures.py builds it.
std::string fixture_image(int k) {
  std::string s(784, '\0');
  for (int i = 0; i < 784; ++i)
    s[static_cast<std::size_t>(i)] = static_cast<char>((7 * i + 13 * k) % 256);
  return s;
}

} // namespace

TEST_CASE("crc32c: published check values, and the table equals the instruction") {
  const char* digits = "123456789";
  CHECK(io::crc32c(digits, 9) == 0xE3069283u); // the CRC catalogue's check value
  CHECK(io::crc32c_portable(digits, 9) == 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF);
  CHECK(io::crc32c(zeros.data(), 32) == 0x8A9136AAu); // RFC 3720, B.4
  CHECK(io::crc32c(ones.data(), 32) == 0x62A8AB43u);
  std::vector<unsigned char> inc(32);
  for (int i = 0; i < 32; ++i)
    inc[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
  CHECK(io::crc32c(inc.data(), 32) == 0x46DD794Eu);
  // extending in pieces equals one pass; table and instruction agree at every length/alignment
  std::mt19937 rng(5);
  std::vector<unsigned char> data(1000);
  for (auto& b : data)
    b = static_cast<unsigned char>(rng());
  for (std::size_t n = 0; n < 200; n += 7)
    for (std::size_t off = 0; off < 9; ++off) {
      const auto whole = io::crc32c(data.data() + off, n);
      CHECK(whole == io::crc32c_portable(data.data() + off, n));
      CHECK(whole ==
            io::crc32c(data.data() + off + n / 3, n - n / 3, io::crc32c(data.data() + off, n / 3)));
    }
  MESSAGE("crc32c uses " << std::string(io::crc32c_hardware() ? "the SSE4.2 instruction"
                                                              : "the table"));
  // the mask round-trips
  for (std::uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu})
    CHECK(io::unmask_crc(io::mask_crc(c)) == c);
}

TEST_CASE("tfrecord: round trip, plain, GZIP and ZLIB, empty and large records") {
  temp_dir dir;
  std::vector<std::string> records = {"", "a", std::string(100000, 'x')};
  std::string big(3 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<char>(i * 2654435761u >> 13);
  records.push_back(big);
  for (auto c : {io::tfrecord_compression::none, io::tfrecord_compression::gzip,
                 io::tfrecord_compression::zlib}) {
    const std::string p = dir.file("r" + std::to_string(static_cast<int>(c)));
    {
      io::tfrecord_writer w(p, c);
      for (const auto& r : records)
        w.write(r);
      w.close();
    }
    CHECK(read_all(p, c) == records);
  }
  // the plain framing, byte by byte: length, masked CRC of the length, data, masked CRC
  const std::string p = dir.file("one");
  {
    io::tfrecord_writer w(p);
    w.write("abc");
  }
  const std::string raw = slurp(p);
  REQUIRE(raw.size() == 8 + 4 + 3 + 4);
  CHECK(raw.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));
  std::uint32_t lc, dc;
  std::memcpy(&lc, raw.data() + 8, 4);
  std::memcpy(&dc, raw.data() + 15, 4);
  CHECK(lc == io::mask_crc(io::crc32c(raw.data(), 8)));
  CHECK(dc == io::mask_crc(io::crc32c("abc", 3)));
}

TEST_CASE("tfrecord: files written by TensorFlow 2.21 read bit-exactly (plain and GZIP)") {
  for (auto [name, c] : {std::pair{"tf_examples.tfrecord", io::tfrecord_compression::none},
                         std::pair{"tf_examples.tfrecord.gz", io::tfrecord_compression::gzip}}) {
    INFO(name);
    const auto recs = read_all(fixture(name).string(), c);
    REQUIRE(recs.size() == 4);
    CHECK(recs[3].empty());
    for (int k = 0; k < 3; ++k) {
      using image = io::fixed_len<"image_raw", io::bytes, shape<>>;
      using label = io::fixed_len<"label", std::int64_t, shape<>>;
      using floats = io::fixed_len<"floats", float, shape<3>>;
      using ids = io::var_len<"ids", std::int64_t>;
      using names = io::var_len<"names", io::bytes>;
      auto [img, lbl, fl, id, nm] =
          io::parse_example<image, label, floats, ids, names>(recs[static_cast<std::size_t>(k)]);
      CHECK(img == fixture_image(k));
      CHECK(lbl.item() == k * 3 + 1);
      CHECK(fl[0] == static_cast<float>(k + 0.5));
      CHECK(fl[1] == static_cast<float>(-2.25 * k));
      CHECK(fl[2] == 3.0e38f);
      CHECK(id == std::vector<std::int64_t>{-1 - k, (std::int64_t{1} << 40) + k, 0});
      if (k == 1)
        CHECK(nm.empty());
      else
        CHECK(nm == std::vector<std::string>{"typeflow", "k=" + std::to_string(k)});
      const auto pixels = io::decode_raw<std::uint8_t>(img);
      REQUIRE(pixels.size() == 784);
      CHECK(pixels[5] == (35 + 13 * k) % 256);
    }
  }
}

TEST_CASE("tfrecord: typeflow's files for TensorFlow (read back by make_tfrecord_fixtures.py)") {
  // The records the script's --check expects; with TensorFlow at hand (.deps/venv-tf) the test
  // runs the script on them, else it checks them with typeflow's own reader only.
  temp_dir dir;
  for (auto c : {io::tfrecord_compression::none, io::tfrecord_compression::gzip}) {
    const std::string p = dir.file(c == io::tfrecord_compression::gzip ? "out.gz" : "out");
    {
      io::tfrecord_writer w(p, c);
      for (int k = 0; k < 25; ++k) {
        std::string img(784, '\0');
        for (int i = 0; i < 784; ++i)
          img[static_cast<std::size_t>(i)] = static_cast<char>((i + k) % 256);
        w.write(io::example_builder().add_bytes("image_raw", img).add_int64("label", k % 10).str());
      }
    }
    const auto recs = read_all(p, c);
    REQUIRE(recs.size() == 25);
    auto [img, lbl] = io::parse_example<io::fixed_len<"image_raw", io::bytes, shape<>>,
                                        io::fixed_len<"label", std::int64_t, shape<>>>(recs[24]);
    CHECK(static_cast<unsigned char>(img[0]) == 24);
    CHECK(lbl.item() == 4);
    const fs::path python =
        fs::path(__FILE__).parent_path().parent_path() / ".deps" / "venv-tf" / "bin" / "python";
    if (fs::exists(python)) {
      const std::string cmd = python.string() + " " +
                              fixture("make_tfrecord_fixtures.py").string() + " --check " + p +
                              (c == io::tfrecord_compression::gzip ? " --gzip" : "") +
                              " 2>/dev/null | grep -q '^ok: TensorFlow'";
      CHECK(std::system(cmd.c_str()) == 0);
    }
  }
}

TEST_CASE("tfrecord: every corruption is an error naming file, record and offset") {
  temp_dir dir;
  const std::string good = dir.file("good");
  {
    io::tfrecord_writer w(good);
    w.write("first record");
    w.write("second record");
  }
  const std::string raw = slurp(good);
  const std::size_t second = 8 + 4 + 12 + 4; // offset of record 1
  auto corrupt = [&](const std::string& name, std::string bytes) {
    const std::string p = dir.file(name);
    spit(p, bytes);
    return error_of([&] { read_all(p); });
  };
  SUBCASE("a flipped bit in a length") {
    std::string b = raw;
    b[second] ^= 0x04;
    const auto msg = corrupt("len", b);
    CHECK(contains(msg, "record 1 at byte offset 28"));
    CHECK(contains(msg, "corrupt length"));
    CHECK(contains(msg, dir.file("len")));
  }
  SUBCASE("a flipped bit in the data") {
    std::string b = raw;
    b[second + 12 + 3] ^= 0x40;
    CHECK(contains(corrupt("data", b), "record 1 at byte offset 28: corrupt data (CRC mismatch"));
  }
  SUBCASE("a flipped bit in a data CRC") {
    std::string b = raw;
    b[second - 1] ^= 0x01;
    CHECK(contains(corrupt("crc", b), "record 0 at byte offset 0: corrupt data"));
  }
  SUBCASE("truncated: header, data, data CRC") {
    CHECK(contains(corrupt("h", raw.substr(0, second + 5)),
                   "record 1 at byte offset 28: truncated record header: 5 of 12 bytes"));
    CHECK(contains(corrupt("d", raw.substr(0, second + 12 + 4)),
                   "record 1 at byte offset 28: truncated record: length 13"));
    CHECK(contains(corrupt("c", raw.substr(0, raw.size() - 2)), "truncated record"));
  }
  SUBCASE("a huge length with a valid CRC is refused before allocating") {
    unsigned char head[12];
    io::detail::store_le64(head, std::uint64_t{1} << 60);
    io::detail::store_le32(head + 8, io::mask_crc(io::crc32c(head, 8)));
    const auto msg = corrupt("huge", std::string(reinterpret_cast<char*>(head), 12) + "xyz");
    CHECK(contains(msg, "truncated record: length 1152921504606846976"));
  }
  SUBCASE("compressed: a huge length allocates only what arrives; garbage; truncation") {
    const std::string p = dir.file("huge.gz");
    // a gzip stream whose only record claims 2^40 bytes and holds 10
    unsigned char head[12];
    io::detail::store_le64(head, std::uint64_t{1} << 40);
    io::detail::store_le32(head + 8, io::mask_crc(io::crc32c(head, 8)));
    const std::string forged = std::string(reinterpret_cast<char*>(head), 12) + "0123456789";
    z_stream zs{};
    REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string gz(1024, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(forged.data()));
    zs.avail_in = static_cast<uInt>(forged.size());
    zs.next_out = reinterpret_cast<Bytef*>(gz.data());
    zs.avail_out = static_cast<uInt>(gz.size());
    REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    gz.resize(gz.size() - zs.avail_out);
    deflateEnd(&zs);
    spit(p, gz);
    const auto msg = error_of([&] { read_all(p, io::tfrecord_compression::gzip); });
    CHECK(contains(msg, "of the decompressed data: truncated record: 10 of 1099511627776"));
    spit(p, gz + "garbage");
    CHECK(contains(error_of([&] { read_all(p, io::tfrecord_compression::gzip); }),
                   "garbage after the compressed stream"));
    spit(p, gz.substr(0, gz.size() / 2));
    CHECK(contains(error_of([&] { read_all(p, io::tfrecord_compression::gzip); }),
                   "truncated compressed stream"));
    spit(p, raw); // not gzip at all
    CHECK(contains(error_of([&] { read_all(p, io::tfrecord_compression::gzip); }),
                   "corrupt compressed stream"));
  }
  SUBCASE("a directory, a FIFO, a missing file") {
    CHECK(contains(error_of([&] { read_all(dir.path.string()); }), "not a regular file"));
    const std::string fifo = dir.file("fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(contains(error_of([&] { read_all(fifo); }), "not a regular file")); // no hang
    CHECK(contains(error_of([&] { read_all(dir.file("missing")); }), "cannot open"));
  }
}

TEST_CASE("example: the wire format, packed and unpacked, unknown fields, repeated keys") {
  // Hand-encoded: Example{features{feature{"f": float_list{1.5 unpacked, 2.5 unpacked, [3.5]
  // packed}}, feature{"i": int64_list{-7 unpacked, [300, 1] packed}}, unknown field 9}}.
  std::string floats, ints, feats;
  auto f32 = [](float v) {
    std::string s(4, '\0');
    std::memcpy(s.data(), &v, 4);
    return s;
  };
  floats += '\x0d' + f32(1.5f) + '\x0d' + f32(2.5f);
  io::detail::put_bytes(floats, 1, f32(3.5f));
  io::detail::put_tag(ints, 1, 0);
  io::detail::put_varint(ints, static_cast<std::uint64_t>(std::int64_t{-7}));
  std::string packed;
  io::detail::put_varint(packed, 300);
  io::detail::put_varint(packed, 1);
  io::detail::put_bytes(ints, 1, packed);
  auto entry = [&](std::string_view name, int kind, const std::string& list) {
    std::string feature, e;
    io::detail::put_bytes(feature, static_cast<std::uint64_t>(kind), list);
    io::detail::put_tag(feature, 7, 0); // an unknown field inside Feature
    io::detail::put_varint(feature, 42);
    io::detail::put_bytes(e, 1, name);
    io::detail::put_bytes(e, 2, feature);
    io::detail::put_bytes(feats, 1, e);
  };
  entry("f", 2, floats);
  entry("i", 3, ints);
  entry("g", 3, ints);
  std::string g_again;
  io::detail::put_bytes(g_again, 1, "\x05"); // a second "g": replaces the first
  entry("g", 3, g_again);
  std::string ex;
  io::detail::put_bytes(ex, 1, feats);
  io::detail::put_tag(ex, 9, 2);
  io::detail::put_varint(ex, 3);
  ex += "xyz";
  auto [f, i, g] =
      io::parse_example<io::var_len<"f", float>, io::fixed_len<"i", std::int64_t, shape<3>>,
                        io::var_len<"g", std::int64_t>>(ex);
  CHECK(f == std::vector<float>{1.5f, 2.5f, 3.5f});
  CHECK(i[0] == -7);
  CHECK(i[1] == 300);
  CHECK(i[2] == 1);
  CHECK(g == std::vector<std::int64_t>{5});
  // the builder's output parses back to the same values
  const std::vector<float> fv = {0.25f, -1e-30f};
  const std::vector<std::int64_t> iv = {std::int64_t{-1} << 62, 0, 1};
  const auto built = io::example_builder().add_floats("f", fv).add_int64s("i", iv).str();
  auto [f2, i2] = io::parse_example<io::var_len<"f", float>, io::var_len<"i", std::int64_t>>(built);
  CHECK(f2 == fv);
  CHECK(i2 == iv);
}

TEST_CASE("example: spec errors name the record and the feature; defaults fill") {
  const auto ex = io::example_builder()
                      .add_int64("label", 3)
                      .add_floats("x", std::vector<float>{1, 2})
                      .add_bytes("raw", "abc")
                      .str();
  const std::string where = "record 7 of train.tfrecord";
  auto msg = error_of(
      [&] { io::parse_example<io::fixed_len<"image_raw", io::bytes, shape<>>>(ex, where); });
  CHECK(contains(msg, "example: record 7 of train.tfrecord: feature \"image_raw\" is missing"));
  msg = error_of([&] { io::parse_example<io::fixed_len<"label", float, shape<>>>(ex, where); });
  CHECK(contains(msg, "feature \"label\" is a int64_list, the spec expects a float_list"));
  msg = error_of([&] { io::parse_example<io::fixed_len<"x", float, shape<3>>>(ex, where); });
  CHECK(contains(msg, "feature \"x\" has 2 values, its shape [3] needs 3"));
  auto [d, lbl] = io::parse_example<io::fixed_len<"missing", float, shape<2>, 0.5>,
                                    io::fixed_len<"label", std::int64_t, shape<>, -1>>(ex, where);
  CHECK(d[0] == 0.5f);
  CHECK(d[1] == 0.5f);
  CHECK(lbl.item() == 3);
  // malformed records: truncated anywhere, a length past the end, a bad wire type
  for (std::size_t cut = 1; cut < ex.size(); ++cut) {
    INFO("cut at " << cut);
    try {
      (void)io::parse_example<io::var_len<"label", std::int64_t>, io::var_len<"x", float>,
                              io::var_len<"raw", io::bytes>>(ex.substr(0, cut), where);
    } catch (const typeflow::error& e) {
      CHECK(contains(e.what(), "record 7 of train.tfrecord"));
    }
  }
  std::string bad = ex;
  bad[1] = '\x7f'; // the features' length now runs past the end
  CHECK(contains(error_of([&] { io::parse_example<>(bad, where); }),
                 "record 7 of train.tfrecord: malformed: length 127"));
  CHECK(io::decode_raw<std::uint16_t>(std::string("\x01\x02\x03\x04", 4)) ==
        std::vector<std::uint16_t>{0x0201, 0x0403});
  CHECK_THROWS_AS(io::decode_raw<std::uint32_t>("abc"), typeflow::error);
}

// ---- the input queue (string_input_producer -> readers -> shuffle_batch) ----------------------

namespace {
/// Three files of 50 Examples each, example i holding id = i (0..149).
std::vector<std::string> id_files(const temp_dir& dir) {
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    files.push_back(dir.file("ids-" + std::to_string(f) + ".tfrecord"));
    io::tfrecord_writer w(files.back());
    for (int i = 0; i < 50; ++i)
      w.write(io::example_builder().add_int64("id", f * 50 + i).str());
  }
  return files;
}
std::int64_t decode_id(std::string_view rec, std::string_view where) {
  return std::get<0>(io::parse_example<io::fixed_len<"id", std::int64_t, shape<>>>(rec, where))
      .item();
}
std::vector<std::int64_t> drain(typeflow::data::input_queue<std::int64_t>& q,
                                std::vector<std::size_t>* sizes = nullptr) {
  std::vector<std::int64_t> all;
  while (true) {
    try {
      const auto b = q.next();
      if (sizes)
        sizes->push_back(b.size());
      all.insert(all.end(), b.begin(), b.end());
    } catch (const typeflow::data::out_of_range&) {
      return all;
    }
  }
}
} // namespace

TEST_CASE("input_queue: shuffle_batch serves every example once per epoch, then out_of_range") {
  temp_dir dir;
  typeflow::data::input_options o{.files = id_files(dir),
                                  .num_epochs = 2,
                                  .shuffle_files = true,
                                  .num_threads = 2,
                                  .batch_size = 16,
                                  .capacity = 64,
                                  .min_after_dequeue = 20,
                                  .allow_smaller_final_batch = true,
                                  .seed = 3};
  typeflow::data::input_queue<std::int64_t> q(o, decode_id);
  std::vector<std::size_t> sizes;
  auto all = drain(q, &sizes);
  REQUIRE(all.size() == 300);
  CHECK(!std::is_sorted(all.begin(), all.end()));
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i)
    CHECK(sizes[i] == 16);
  CHECK(sizes.back() == 300 % 16);
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 300; ++i)
    CHECK(all[static_cast<std::size_t>(i)] == i / 2);
  CHECK_THROWS_AS(q.next(), typeflow::data::out_of_range); // and again
}

TEST_CASE("input_queue: one reader is reproducible from the seed; batch keeps file order") {
  temp_dir dir;
  const auto files = id_files(dir);
  auto run = [&](std::uint64_t seed, bool shuffle) {
    typeflow::data::input_options o{.files = files,
                                    .num_epochs = 1,
                                    .batch_size = 10,
                                    .shuffle = shuffle,
                                    .capacity = 100,
                                    .min_after_dequeue = 30,
                                    .seed = seed};
    typeflow::data::input_queue<std::int64_t> q(o, decode_id);
    return drain(q);
  };
  const auto a = run(7, true), b = run(7, true), c = run(8, true);
  CHECK(a.size() == 150);
  CHECK(a == b);
  CHECK(a != c);
  const auto in_order = run(7, false);
  REQUIRE(in_order.size() == 150);
  for (std::int64_t i = 0; i < 150; ++i)
    CHECK(in_order[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("input_queue: a short last batch is dropped unless allowed; memory stays bounded") {
  temp_dir dir;
  typeflow::data::input_options o{
      .files = id_files(dir), .num_epochs = 1, .batch_size = 16, .shuffle = false, .capacity = 40};
  typeflow::data::input_queue<std::int64_t> q(o, decode_id);
  std::this_thread::sleep_for(std::chrono::milliseconds(50)); // the reader fills the queue
  CHECK(q.queued() <= 40);
  CHECK(drain(q).size() == 144); // 9 batches of 16; the last 6 examples are not a batch
  // forever (num_epochs 0): the destructor stops a reader blocked on a full queue
  o.num_epochs = 0;
  typeflow::data::input_queue<std::int64_t> forever(o, decode_id);
  CHECK(forever.next().size() == 16);
}

TEST_CASE("input_queue: a corrupt record or a bad feature reaches next() as a typeflow::error") {
  temp_dir dir;
  auto files = id_files(dir);
  std::string raw = slurp(files[1]);
  raw[raw.size() / 2] ^= 0x10;
  spit(files[1], raw);
  typeflow::data::input_options o{
      .files = files, .num_epochs = 1, .batch_size = 8, .shuffle = false, .capacity = 16};
  typeflow::data::input_queue<std::int64_t> q(o, decode_id);
  const auto msg = error_of([&] { drain(q); });
  CHECK(contains(msg, files[1]));
  CHECK(contains(msg, "corrupt"));
  typeflow::data::input_queue<std::int64_t> wrong(o, [](std::string_view rec,
                                                        std::string_view where) {
    return std::get<0>(io::parse_example<io::fixed_len<"id", float, shape<>>>(rec, where)).size();
  });
  CHECK(contains(error_of([&] { drain(wrong); }), "record 0 of " + files[0]));
  CHECK_THROWS_AS(typeflow::data::input_queue<std::int64_t>(
                      {.files = files, .batch_size = 8, .capacity = 10}, decode_id),
                  typeflow::error); // capacity below batch_size + min_after_dequeue
}
