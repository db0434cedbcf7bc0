// Checkpoints: safetensors save/restore of a session's variables, strict validation of damaged
// files, crash-safe saving, and interop with a file written by an independent implementation.
#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "typeflow/io/checkpoint.hpp"
#include "typeflow/typeflow.hpp"

namespace fs = std::filesystem;
using namespace typeflow;

namespace {

constexpr auto w = variable<"layer/weights", float, shape<2, 3>, uniform<-1.0, 1.0>>;
constexpr auto b = variable<"layer/biases", double, shape<3>, fill<0.5>>;
constexpr auto step = variable<"global_step", std::int64_t, shape<>>;
constexpr auto counts = variable<"stats/counts", std::int32_t, shape<4>, fill<3>>;
constexpr auto flags = variable<"stats/flags", bool, shape<3>, ones>;

using bytes_t = std::vector<std::uint8_t>;
using state_t = std::map<std::string, bytes_t>;

/// A fresh directory under the system temp directory, removed with everything in it.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("typeflow_test_checkpoint_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(path))
      r.push_back(e.path().filename().string());
    std::sort(r.begin(), r.end());
    return r;
  }
};

bytes_t slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f);
  return bytes_t(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void spit(const fs::path& p, const bytes_t& data) {
  fs::remove(p); // a new file, not a truncated one: ext4 flushes truncated-and-rewritten files
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  REQUIRE(f);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  REQUIRE(f);
}

/// Every variable's bytes, by name.
template <class S>
state_t state(S& s) {
  state_t r;
  s.for_each_variable([&](const auto& v) {
    const auto* p = static_cast<const std::uint8_t*>(v.data);
    r[std::string(v.name)] = bytes_t(p, p + v.bytes);
  });
  return r;
}

/// The message of the typeflow::error that restore_checkpoint throws ("" if none).
template <class S>
std::string restore_error(S& s, const fs::path& file) {
  try {
    restore_checkpoint(s, file);
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// A safetensors file from a header text and a data buffer.
bytes_t make_file(const std::string& header, const bytes_t& data = {}) {
  // Sized once and filled with memcpy (g++ 12 -O2 warns falsely on vector::insert here).
  bytes_t r(8 + header.size() + data.size());
  const std::uint64_t n = header.size();
  std::memcpy(r.data(), &n, 8);
  if (!header.empty())
    std::memcpy(r.data() + 8, header.data(), header.size());
  if (!data.empty())
    std::memcpy(r.data() + 8 + header.size(), data.data(), data.size());
  return r;
}

std::uint64_t header_length(const bytes_t& file) {
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return n;
}

std::string header_of(const bytes_t& file) {
  return std::string(file.begin() + 8, file.begin() + 8 + static_cast<long>(header_length(file)));
}

bytes_t data_of(const bytes_t& file) {
  return bytes_t(file.begin() + 8 + static_cast<long>(header_length(file)), file.end());
}

/// `file` with the first occurrence of `from` in its header replaced by `to`.
bytes_t edit_header(const bytes_t& file, const std::string& from, const std::string& to) {
  std::string h = header_of(file);
  const auto at = h.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "\"" << from << "\" not in header " << h);
  h.replace(at, from.size(), to);
  return make_file(h, data_of(file));
}

template <class T>
bytes_t bytes_of(std::initializer_list<T> values) {
  bytes_t r(values.size() * sizeof(T));
  std::memcpy(r.data(), values.begin(), r.size());
  return r;
}

/// A session holding w, b and step with recognizable values (step = 1234, w with -0, NaN, inf).
void set_values(session<>& s) {
  s.write(w, tensor<float>({2, 3}, {-0.0f, std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(), 1e-40f, -3.5f, 0.1f}));
  s.write(b, tensor<double>({3}, {0.1, -2.25, 1e300}));
  s.write(step, tensor<std::int64_t>(std::vector<std::int64_t>{}, {1234}));
}

fs::path fixture(const char* name) {
#ifdef TYPEFLOW_SOURCE_DIR
  return fs::path(TYPEFLOW_SOURCE_DIR) / "test" / "fixtures" / name;
#else
  return fs::path(__FILE__).parent_path() / "fixtures" / name;
#endif
}

} // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("save then restore gives back every variable bitwise") {
    temp_dir dir;
    const fs::path file = dir.path / "model.safetensors";
    session<> s;
    s.initialize(w, b, step, counts, flags);
    CHECK(s.variable_count() == 5);
    set_values(s);
    const state_t saved = state(s);
    save_checkpoint(s, file);
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"}); // no temp file left

    // Change everything, then restore.
    s.write(w, tensor<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
    s.write(b, tensor<double>({3}, {7, 8, 9}));
    s.write(step, tensor<std::int64_t>(std::vector<std::int64_t>{}, {0}));
    s.write(counts, tensor<std::int32_t>({4}, {-1, -1, -1, -1}));
    s.write(flags, tensor<bool>({3}, {false, true, false}));
    CHECK(state(s) != saved);
    restore_checkpoint(s, file);
    CHECK(state(s) == saved);
    const tensor<float> wt = s.read(w);
    CHECK(std::signbit(wt[0]));
    CHECK(std::isnan(wt[1]));
    CHECK(wt[2] == std::numeric_limits<float>::infinity());
    CHECK(s.read(step)[0] == 1234);
    CHECK(s.read(b)[2] == 1e300);

    // Into a brand-new session whose initializers were seeded differently.
    session<> s2(session_options{.seed = 7});
    s2.initialize(w, b, step, counts, flags);
    CHECK(state(s2) != saved);
    restore_checkpoint(s2, file);
    CHECK(state(s2) == saved);
  }

  TEST_CASE("the file is standard safetensors") {
    temp_dir dir;
    const fs::path file = dir.path / "model.safetensors";
    session<> s;
    s.initialize(w, b, step);
    set_values(s);
    save_checkpoint(s, file);
    const bytes_t raw = slurp(file);
    REQUIRE(raw.size() >= 8);
    CHECK((8 + header_length(raw)) % 8 == 0); // data 8-byte aligned
    CHECK(header_of(raw).rfind("{\"__metadata__\":{\"format\":\"typeflow\"}", 0) == 0);
    CHECK(contains(header_of(raw),
                   "\"global_step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}"));
    CHECK(raw.size() == 8 + header_length(raw) + 8 + 3 * 8 + 6 * 4);

    std::map<std::string, std::string> meta;
    const auto ts = io::read_safetensors(file, &meta);
    CHECK(meta == std::map<std::string, std::string>{{"format", "typeflow"}});
    REQUIRE(ts.size() == 3);
    CHECK(ts[0].name == "global_step"); // in data order, which is name order
    CHECK(ts[0].dtype == "int64");
    CHECK(ts[0].shape.empty());
    CHECK(ts[0].bytes == bytes_of<std::int64_t>({1234}));
    CHECK(ts[1].name == "layer/biases");
    CHECK(ts[1].dtype == "float64");
    CHECK(ts[1].shape == std::vector<std::int64_t>{3});
    CHECK(ts[1].bytes == bytes_of<double>({0.1, -2.25, 1e300}));
    CHECK(ts[2].name == "layer/weights");
    CHECK(ts[2].dtype == "float32");
    CHECK(ts[2].shape == std::vector<std::int64_t>{2, 3});
  }

  TEST_CASE("io layer: round trip of every dtype, metadata and odd names") {
    temp_dir dir;
    const fs::path file = dir.path / "t.safetensors";
    const std::vector<io::st_tensor> ts = {
        {"z", "float32", {2, 3}, bytes_of<float>({1, 2, 3, 4, 5, 6})},
        {"a\"b\\c\n\xc3\xa9", "float64", {1}, bytes_of<double>({-1.5})},
        {"ints", "int32", {2}, bytes_of<std::int32_t>({7, -8})},
        {"scalar", "int64", {}, bytes_of<std::int64_t>({-9})},
        {"mask", "bool", {3}, {1, 0, 1}},
        {"none", "float32", {0, 4}, {}},
    };
    const std::map<std::string, std::string> meta = {{"format", "typeflow"},
                                                     {"note", "tab\there \"quoted\" \xe2\x82\xac"}};
    io::write_safetensors(file, ts, meta);
    std::map<std::string, std::string> meta2;
    const auto back = io::read_safetensors(file, &meta2);
    CHECK(meta2 == meta);
    REQUIRE(back.size() == ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) { // zero-size "none" sorts by (begin, end)
      const auto it = std::find_if(back.begin(), back.end(),
                                   [&](const io::st_tensor& t) { return t.name == ts[i].name; });
      REQUIRE(it != back.end());
      CHECK(it->dtype == ts[i].dtype);
      CHECK(it->shape == ts[i].shape);
      CHECK(it->bytes == ts[i].bytes);
    }
    CHECK((8 + header_length(slurp(file))) % 8 == 0);

    // Without metadata there is no "__metadata__" entry.
    io::write_safetensors(file, {ts[0]});
    CHECK(header_of(slurp(file)).rfind("{\"z\":", 0) == 0);
    std::map<std::string, std::string> none = {{"x", "y"}};
    CHECK(io::read_safetensors(file, &none).size() == 1);
    CHECK(none.empty());

    // The writer refuses what it cannot write, and leaves the previous file alone.
    const bytes_t before = slurp(file);
    CHECK_THROWS_AS(io::write_safetensors(file, {{"x", "float32", {2}, {1, 2, 3}}}), error);
    CHECK_THROWS_AS(io::write_safetensors(file, {{"x", "float8", {1}, {1}}}), error);
    CHECK_THROWS_AS(io::write_safetensors(file, {{"x", "int32", {-1}, {}}}), error);
    CHECK_THROWS_AS(io::write_safetensors(file, {ts[4], ts[4]}), error);
    CHECK_THROWS_AS(io::write_safetensors(file, {{"__metadata__", "bool", {1}, {1}}}), error);
    CHECK_THROWS_AS(io::write_safetensors(file, {{"bad\xff", "bool", {1}, {1}}}), error);
    CHECK(slurp(file) == before);
    CHECK(dir.entries() == std::vector<std::string>{"t.safetensors"});
  }

  TEST_CASE("the reader accepts what the format allows") {
    temp_dir dir;
    const fs::path file = dir.path / "ok.safetensors";
    // Whitespace, escapes, header order unlike data order, a zero-size tensor between others.
    spit(file, make_file(" {\n\t\"b\" : {\"shape\":[2],\"dtype\":\"I32\",\"data_offsets\":[4,12]},"
                         "\"a\\u00e9\\ud83d\\ude00\\/\":{\"dtype\":\"F32\",\"shape\":[],"
                         "\"data_offsets\":[0,4]} , \"e\":{\"dtype\":\"F64\",\"shape\":[0],"
                         "\"data_offsets\":[4,4]},\"__metadata__\":{}}\r\n ",
                         bytes_of<std::int32_t>({10, 20, 30})));
    const auto ts = io::read_safetensors(file);
    REQUIRE(ts.size() == 3);
    CHECK(ts[0].name == "a\xc3\xa9\xf0\x9f\x98\x80/");
    CHECK(ts[0].bytes == bytes_of<std::int32_t>({10}));
    CHECK(ts[1].name == "e");
    CHECK(ts[1].bytes.empty());
    CHECK(ts[2].name == "b");
    CHECK(ts[2].shape == std::vector<std::int64_t>{2});
    CHECK(ts[2].bytes == bytes_of<std::int32_t>({20, 30}));
    spit(file, make_file("{}"));
    CHECK(io::read_safetensors(file).empty());
    // Tensors at the same place (zero-size) come in header order.
    spit(file, make_file("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}"));
    const auto zs = io::read_safetensors(file);
    REQUIRE(zs.size() == 2);
    CHECK(zs[0].name == "z");
    CHECK(zs[1].name == "a");
  }

  TEST_CASE("restore refuses a session that does not match, leaving it untouched") {
    temp_dir dir;
    const fs::path file = dir.path / "model.safetensors";
    {
      session<> s;
      s.initialize(w, b, step);
      set_values(s);
      save_checkpoint(s, file);
    }

    SUBCASE("different shape") {
      constexpr auto w33 = variable<"layer/weights", float, shape<3, 3>>;
      session<> s;
      s.initialize(w33, b, step);
      s.write(b, tensor<double>({3}, {4, 5, 6}));
      const state_t before = state(s);
      const std::string msg = restore_error(s, file);
      CHECK(contains(msg, "typeflow: checkpoint " + file.string() + ": "));
      CHECK(contains(msg, "variable \"layer/weights\" has shape [3, 3] in the session but [2, 3] "
                          "in the file"));
      CHECK(state(s) == before); // b, which matches, was not restored either
    }
    SUBCASE("different dtype") {
      constexpr auto wd = variable<"layer/weights", double, shape<2, 3>>;
      session<> s;
      s.initialize(wd, b, step);
      const state_t before = state(s);
      const std::string msg = restore_error(s, file);
      CHECK(contains(msg, "variable \"layer/weights\" is float64 in the session but float32 in "
                          "the file"));
      CHECK(state(s) == before);
    }
    SUBCASE("a variable missing from the file") {
      constexpr auto extra = variable<"layer/extra", float, shape<2>>;
      session<> s;
      s.initialize(w, b, step, extra);
      const state_t before = state(s);
      const std::string msg = restore_error(s, file);
      CHECK(contains(msg, "variable \"layer/extra\" (float32 [2]) is missing from the file"));
      CHECK(state(s) == before);
    }
    SUBCASE("a tensor the session does not have") {
      session<> s;
      s.initialize(w, b);
      const state_t before = state(s);
      const std::string msg = restore_error(s, file);
      CHECK(contains(msg, "the file has tensor \"global_step\" (int64 []), which is not a variable "
                          "of the session"));
      CHECK(state(s) == before);
    }
    SUBCASE("a session without variables") {
      session<> s;
      const std::string msg = restore_error(s, file);
      CHECK(contains(msg, "\"layer/weights\""));
      CHECK(contains(msg, "no variables yet"));
      CHECK(s.variable_count() == 0);
    }
    SUBCASE("several problems are all reported") {
      constexpr auto w33 = variable<"layer/weights", float, shape<3, 3>>;
      constexpr auto extra = variable<"layer/extra", float, shape<2>>;
      session<> s;
      s.initialize(w33, extra, step);
      const std::string msg = restore_error(s, file);
      CHECK(contains(msg, "\"layer/weights\" has shape"));
      CHECK(contains(msg, "\"layer/extra\" (float32 [2]) is missing"));
      CHECK(contains(msg, "tensor \"layer/biases\""));
    }
    SUBCASE("a file that does not exist") {
      session<> s;
      s.initialize(w, b, step);
      const state_t before = state(s);
      const std::string msg = restore_error(s, dir.path / "nope.safetensors");
      CHECK(contains(msg, "nope.safetensors: cannot open"));
      CHECK(state(s) == before);
    }
  }

  TEST_CASE("damaged files are rejected with typeflow::error, never a crash") {
    temp_dir dir;
    const fs::path good = dir.path / "good.safetensors";
    const fs::path bad = dir.path / "bad.safetensors";
    session<> s;
    s.initialize(w, b, step);
    set_values(s);
    save_checkpoint(s, good);
    const bytes_t raw = slurp(good);
    s.write(w, tensor<float>({2, 3}, {9, 9, 9, 9, 9, 9}));
    const state_t before = state(s);

    const auto rejected = [&](const bytes_t& file) {
      spit(bad, file);
      CHECK_THROWS_AS(io::read_safetensors(bad), error);
      CHECK_THROWS_AS(restore_checkpoint(s, bad), error);
      CHECK(state(s) == before);
    };
    const auto message = [&](const bytes_t& file) -> std::string {
      spit(bad, file);
      try {
        io::read_safetensors(bad);
      } catch (const error& e) {
        return e.what();
      }
      return "";
    };

    SUBCASE("truncated anywhere") {
      for (std::size_t n = 0; n < raw.size(); ++n)
        rejected(bytes_t(raw.begin(), raw.begin() + static_cast<long>(n)));
      CHECK(contains(message(bytes_t(raw.begin(), raw.begin() + 5)), "too short"));
      CHECK(contains(message(bytes_t(raw.begin(), raw.begin() + static_cast<long>(raw.size() / 2))),
                     "exceeds"));
      CHECK(contains(message(bytes_t(raw.begin(), raw.end() - 1)), "outside the"));
    }
    SUBCASE("extra bytes at the end") {
      bytes_t longer = raw;
      longer.push_back(0);
      rejected(longer);
      CHECK(contains(message(longer), "1 bytes of trailing data"));
    }
    SUBCASE("header length corrupted") {
      const std::uint64_t n = header_length(raw);
      for (std::uint64_t len :
           {std::uint64_t{0}, std::uint64_t{1}, n - 1, n + 1, n + 8, std::uint64_t{raw.size() - 7},
            std::uint64_t{100'000'001}, std::uint64_t{1} << 63,
            std::numeric_limits<std::uint64_t>::max()}) {
        CAPTURE(len);
        bytes_t f = raw;
        std::memcpy(f.data(), &len, 8);
        rejected(f);
      }
      bytes_t f = raw;
      const std::uint64_t huge = 200'000'000;
      std::memcpy(f.data(), &huge, 8);
      CHECK(contains(message(f), "absurd"));
    }
    SUBCASE("JSON corrupted") {
      const std::vector<std::pair<std::string, std::string>> edits = {
          {"{\"__metadata__\"", "[\"__metadata__\""},
          {"\"dtype\":\"F32\"", "\"dtype\":\"F16\""},
          {"\"dtype\":\"F32\"", "\"dtype\":\"X32\""},
          {"\"dtype\":\"F32\"", "\"dtype\": 32  "},
          {"\"dtype\"", "\"dtypo\""},
          {"\"shape\":[2,3]", "\"shape\":[2,-3]"},
          {"\"shape\":[2,3]", "\"shape\":[2.,3]"},
          {"\"shape\":[2,3]", "\"shape\":[2,03]"},
          {"\"shape\":[2,3]", "\"shape\":[2 3]"},
          {"\"shape\":[2,3]", "\"shape\":[2,3,]"},
          {"\"shape\":[2,3]", "\"shape\":{2,3}"},
          {"\"shape\":[2,3]", "\"shape\":[2,true]"},
          {"\"shape\":[2,3]", "\"shape\":[2,99999999999999999999]"},
          {"\"format\":", "\"format\";"},
          {"\"format\":\"typeflow\"", "\"format\":1"},
          {"\"format\"", "\"form\\at\""},
          {"\"format\"", "\"form\\u12\""},
          {"\"format\"", "\"form\\ud800\""},
          {"\"format\"", "\"form\xff\""},
          {"\"format\"", "\"form\xc0\xaf\""},
          {"\"format\"", std::string("\"form\0t\"", 8)},
          {"\"global_step\"", "\"layer/biases\""}, // duplicate key
          {"\"global_step\"", "\"__metadata__\""},
          {"\"global_step\":{", "\"global_step\":{\"extra\":1,"},
          {",\"data_offsets\":[0,8]", ""},
          {"}}", "}"},
          {"{", "{{"},
          {"\"", ""},
      };
      for (const auto& edit : edits) {
        CAPTURE(edit.first);
        CAPTURE(edit.second);
        rejected(edit_header(raw, edit.first, edit.second));
      }
      CHECK(contains(message(edit_header(raw, "\"dtype\":\"F32\"", "\"dtype\":\"F8_E4M3\"")),
                     "dtype \"F8_E4M3\", which typeflow does not support"));
      CHECK(contains(message(edit_header(raw, "\"format\":", "\"format\";")),
                     "at byte 25 of the header"));
      CHECK(contains(message(edit_header(raw, "\"global_step\"", "\"layer/biases\"")),
                     "duplicate key \"layer/biases\""));
      CHECK(contains(message(edit_header(raw, "\"global_step\"", "\"__metadata__\"")),
                     "duplicate key \"__metadata__\""));
      CHECK(contains(message(edit_header(raw, "\"shape\":[2,3]", "\"shape\":[2,true]")),
                     "true, false and null are not used"));
      CHECK(contains(message(edit_header(raw, "\"format\":\"typeflow\"", "\"format\":null")),
                     "true, false and null are not used"));
      CHECK(contains(message(edit_header(raw, "\"shape\":[2,3]", "\"shape\":[2,3e0]")),
                     "only integers"));
      CHECK(contains(
          message(edit_header(raw, "\"shape\":[2,3]", "\"shape\":[2,99999999999999999999]")),
          "integer too large"));
      CHECK(contains(message(edit_header(raw, "\"format\"", "\"form\xff\"")),
                     "header is not valid JSON"));
      // Trailing garbage after the JSON value, in place of the padding.
      std::string h = header_of(raw);
      h.back() = 'x';
      rejected(make_file(h, data_of(raw)));
      // A NUL byte after the JSON value (not the end of the header), and a byte-order mark.
      h.back() = '\0';
      rejected(make_file(h, data_of(raw)));
      CHECK(contains(message(make_file(h, data_of(raw))),
                     "at byte " + std::to_string(h.size() - 1) + " of the header"));
      rejected(make_file("\xef\xbb\xbf" + header_of(raw), data_of(raw)));
      rejected(make_file("\xef\xbb\xbf{}"));
      // Deep nesting does not overflow the stack.
      rejected(make_file(std::string(100000, '[') + std::string(100000, ']')));
      CHECK(contains(message(make_file(std::string(100, '['))), "nesting deeper"));
      // 64 levels are still parsed (and refused as no object), 65 are too deep.
      CHECK(contains(message(make_file(std::string(64, '[') + std::string(64, ']'))),
                     "the header is not a JSON object"));
      CHECK(contains(message(make_file(std::string(65, '[') + std::string(65, ']'))),
                     "nesting deeper than 64 levels"));
      // Every byte of the header replaced by a few values: either still a valid file, or an error.
      for (std::size_t i = 8; i < 8 + header_length(raw); ++i)
        for (std::uint8_t v : {0x00, 0x22, 0x2c, 0x30, 0x5b, 0x7d, 0xff}) {
          bytes_t f = raw;
          f[i] = v;
          spit(bad, f);
          try {
            restore_checkpoint(s, bad);
            restore_checkpoint(s, good); // it was valid after all: put things back
            s.write(w, tensor<float>({2, 3}, {9, 9, 9, 9, 9, 9}));
          } catch (const error&) {
          }
          CHECK(state(s) == before);
        }
    }
    SUBCASE("data offsets edited") {
      // Data layout: global_step [0,8], layer/biases [8,32], layer/weights [32,56].
      const std::vector<std::pair<std::string, std::string>> edits = {
          {"[0,8]", "[0,9]"},     // size does not match dtype and shape
          {"[0,8]", "[1,9]"},     // gap at the start
          {"[8,32]", "[7,31]"},   // overlap
          {"[8,32]", "[9,33]"},   // gap, overlap
          {"[32,56]", "[33,57]"}, // out of range
          {"[32,56]", "[56,32]"}, // reversed
          {"[32,56]", "[32]"},
          {"[32,56]", "[32,56,80]"},
          {"[32,56]", "[-32,56]"},
          {"[32,56]", "\"32,56\""},
          {"[32,56]", "[18446744073709551615,56]"},
          {"[0,8]", "[32,40]"}, // two tensors at the same place
          {"[0,8]", "[-0,8]"},  // negative zero
      };
      for (const auto& edit : edits) {
        CAPTURE(edit.second);
        rejected(edit_header(raw, edit.first, edit.second));
      }
      CHECK(contains(message(edit_header(raw, "[8,32]", "[9,33]")), "belong to no tensor"));
      CHECK(contains(message(edit_header(raw, "[8,32]", "[7,31]")), "overlaps"));
      CHECK(contains(message(edit_header(raw, "[0,8]", "[-0,8]")),
                     "data_offsets that are not two non-negative integers"));
      CHECK(contains(message(edit_header(raw, "\"shape\":[2,3]", "\"shape\":[2,-0]")),
                     "shape extent that is not a non-negative integer"));
      // Offsets consistent with the header, but the data is shorter than they claim.
      rejected(make_file("{\"x\":{\"dtype\":\"I64\",\"shape\":[1000000000000],\"data_offsets\":[0,"
                         "8000000000000]}}",
                         bytes_t(64)));
      rejected(make_file("{\"x\":{\"dtype\":\"I64\",\"shape\":[4611686018427387904,4],"
                         "\"data_offsets\":[0,0]}}"));
    }
    SUBCASE("invalid bool bytes") {
      spit(bad,
           make_file("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", {1, 2}));
      CHECK_THROWS_AS(io::read_safetensors(bad), error);
    }
    SUBCASE("random damage") {
      std::mt19937 rng(12345);
      for (int iter = 0; iter < 3000; ++iter) {
        bytes_t f = raw;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k)
          f[rng() % f.size()] = static_cast<std::uint8_t>(rng());
        if (rng() % 4 == 0)
          f.resize(rng() % f.size());
        spit(bad, f);
        try {
          (void)io::read_safetensors(bad);
        } catch (const error&) {
        }
      }
      for (int iter = 0; iter < 300; ++iter) { // noise, some with a plausible length field
        bytes_t f(rng() % 200);
        for (auto& c : f)
          c = static_cast<std::uint8_t>(rng());
        if (f.size() >= 8 && iter % 2) {
          const std::uint64_t n = rng() % (f.size() - 7);
          std::memcpy(f.data(), &n, 8);
        }
        spit(bad, f);
        try {
          (void)io::read_safetensors(bad);
        } catch (const error&) {
        }
      }
      CHECK(state(s) == before);
    }
    SUBCASE("not a regular file") {
      CHECK_THROWS_AS(io::read_safetensors(dir.path), error);
      const fs::path fifo = dir.path / "fifo";
      REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
      CHECK_THROWS_AS(io::read_safetensors(fifo), error); // refused, without hanging
    }
  }

  TEST_CASE("a failed save leaves the previous checkpoint intact and no temporary file") {
    temp_dir dir;
    const fs::path file = dir.path / "model.safetensors";
    session<> s;
    s.initialize(w, b, step);
    set_values(s);
    save_checkpoint(s, file);
    const bytes_t original = slurp(file);
    s.write(step, tensor<std::int64_t>(std::vector<std::int64_t>{}, {99}));

    SUBCASE("the temporary file cannot be created") {
      // A directory where the writer's temporary file would go.
      const fs::path blocker = dir.path / ("model.safetensors.tmp." + std::to_string(::getpid()));
      fs::create_directory(blocker);
      std::string msg;
      try {
        save_checkpoint(s, file);
      } catch (const error& e) {
        msg = e.what();
      }
      CHECK(contains(msg, "cannot create temporary file"));
      CHECK(slurp(file) == original);
      CHECK(fs::is_directory(blocker)); // not ours to remove
      fs::remove(blocker);
      CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
    }
    SUBCASE("the rename fails (the destination is a non-empty directory)") {
      const fs::path target = dir.path / "taken";
      fs::create_directories(target / "inside");
      CHECK_THROWS_AS(save_checkpoint(s, target), error);
      CHECK(fs::is_directory(target / "inside"));
      CHECK(dir.entries() == std::vector<std::string>{"model.safetensors", "taken"});
      CHECK(slurp(file) == original);
    }
    SUBCASE("the directory does not exist") {
      std::string msg;
      try {
        save_checkpoint(s, dir.path / "missing" / "model.safetensors");
      } catch (const error& e) {
        msg = e.what();
      }
      CHECK(contains(msg, "missing does not exist"));
      CHECK_THROWS_AS(io::write_safetensors(dir.path / "missing" / "t.safetensors", {}), error);
      CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
    }
    SUBCASE("a successful save replaces the file") {
      save_checkpoint(s, file);
      CHECK(slurp(file) != original);
      CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
      session<> s2;
      s2.initialize(w, b, step);
      restore_checkpoint(s2, file);
      CHECK(s2.read(step)[0] == 99);
    }
    // The original checkpoint still restores.
    session<> s3;
    s3.initialize(w, b, step);
    restore_checkpoint(s3, file);
    CHECK(s3.read(b)[1] == -2.25);
  }

  TEST_CASE("reads a file written by an independent implementation") {
    // test/fixtures/reference.safetensors, from test/fixtures/make_safetensors_fixture.py.
    const fs::path file = fixture("reference.safetensors");
    REQUIRE_MESSAGE(fs::exists(file), file.string() << " not found");
    std::map<std::string, std::string> meta;
    const auto ts = io::read_safetensors(file, &meta);
    CHECK(meta.at("format") == "np");
    std::map<std::string, io::st_tensor> by;
    for (const auto& t : ts)
      by[t.name] = t;
    REQUIRE(by.size() == 6);
    CHECK(by["layer/weights"].dtype == "float32");
    CHECK(by["layer/weights"].shape == std::vector<std::int64_t>{2, 3});
    CHECK(by["layer/weights"].bytes == bytes_of<float>({0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f}));
    CHECK(by["layer/biases"].dtype == "float64");
    CHECK(by["layer/biases"].bytes == bytes_of<double>({0.1, -2.25, 3.0}));
    CHECK(by["global_step"].dtype == "int64");
    CHECK(by["global_step"].shape.empty());
    CHECK(by["global_step"].bytes == bytes_of<std::int64_t>({42}));
    CHECK(by["stats/counts"].dtype == "int32");
    CHECK(by["stats/counts"].bytes == bytes_of<std::int32_t>({1, -2, 3, -2147483647 - 1}));
    CHECK(by["stats/flags"].dtype == "bool");
    CHECK(by["stats/flags"].bytes == bytes_t{1, 0, 1, 1});
    CHECK(by["empty"].shape == std::vector<std::int64_t>{2, 0});
    CHECK(by["empty"].bytes.empty());

    // Restoring a session from it: the extra "empty" tensor is refused, the others match.
    constexpr auto counts22 = variable<"stats/counts", std::int32_t, shape<2, 2>>;
    constexpr auto flags4 = variable<"stats/flags", bool, shape<4>>;
    session<> s;
    s.initialize(w, b, step, counts22, flags4);
    CHECK(contains(restore_error(s, file), "the file has tensor \"empty\""));
    temp_dir dir;
    std::vector<io::st_tensor> without_empty;
    for (const auto& t : ts)
      if (t.name != "empty")
        without_empty.push_back(t);
    io::write_safetensors(dir.path / "ref.safetensors", without_empty, meta);
    restore_checkpoint(s, dir.path / "ref.safetensors");
    CHECK(s.read(step)[0] == 42);
    CHECK(s.read(w)[5] == 2.5f);
    CHECK(s.read(counts22)(1, 1) == -2147483647 - 1);
    CHECK(s.read(flags4)[1] == false);
    CHECK(s.read(flags4)[3] == true);
  }

  TEST_CASE("temporaries of dead writers are removed by the next save or restore, live ones kept") {
    temp_dir dir;
    const fs::path file = dir.path / "model.safetensors";
    // A dead writer's pid: a child that has exited and been reaped.
    const ::pid_t dead = ::fork();
    REQUIRE(dead >= 0);
    if (dead == 0)
      ::_exit(0);
    REQUIRE(::waitpid(dead, nullptr, 0) == dead);
    // A live writer: a child blocked until we kill it.
    const ::pid_t live = ::fork();
    REQUIRE(live >= 0);
    if (live == 0) {
      ::pause();
      ::_exit(0);
    }
    const auto make = [&](const std::string& name) { std::ofstream(dir.path / name) << "partial"; };
    const std::string dead_tmp = "model.safetensors.tmp." + std::to_string(dead);
    const std::string live_tmp = "model.safetensors.tmp." + std::to_string(live);
    make(dead_tmp);
    make(live_tmp);
    make("model.safetensors.tmp.notapid");
    make("other.safetensors.tmp." + std::to_string(dead)); // another file's: not ours
    session<> s;
    s.initialize(w, b, step);
    save_checkpoint(s, file);
    CHECK(dir.entries() ==
          std::vector<std::string>{"model.safetensors", live_tmp, "model.safetensors.tmp.notapid",
                                   "other.safetensors.tmp." + std::to_string(dead)});
    make(dead_tmp);
    restore_checkpoint(s, file);
    CHECK(!fs::exists(dir.path / dead_tmp));
    CHECK(fs::exists(dir.path / live_tmp));
    ::kill(live, SIGKILL);
    ::waitpid(live, nullptr, 0);
    restore_checkpoint(s, file); // now the writer is dead: its temporary goes
    CHECK(!fs::exists(dir.path / live_tmp));
  }

  TEST_CASE("a writer killed at random moments 50 times: the checkpoint always restores whole") {
    temp_dir dir;
    const fs::path file = dir.path / "model.safetensors";
    constexpr auto big = variable<"big", float, shape<1 << 20>>;
    session<> s(session_options{.threads = 1});
    s.initialize(big);
    std::mt19937 rng(20261125);
    std::uniform_int_distribution<int> delay_us(0, 40000);
    float last = 0;
    int torn_temporaries = 0;
    for (int round = 0; round < 50; ++round) {
      const std::string writer = TYPEFLOW_CHECKPOINT_WRITER;
      const std::string target = file.string();
      const std::string start = std::to_string(static_cast<long long>(last) + 1);
      char* argv[] = {const_cast<char*>(writer.c_str()), const_cast<char*>(target.c_str()),
                      const_cast<char*>(start.c_str()), nullptr};
      ::pid_t pid = 0;
      REQUIRE(::posix_spawn(&pid, writer.c_str(), nullptr, nullptr, argv, environ) == 0);
      // the first round waits for a first checkpoint; then kill at a random moment
      for (int i = 0; round == 0 && i < 2000 && !fs::exists(file); ++i)
        ::usleep(5000);
      ::usleep(static_cast<unsigned>(delay_us(rng)));
      ::kill(pid, SIGKILL);
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      REQUIRE(WIFSIGNALED(status)); // killed, not crashed on its own
      REQUIRE(fs::exists(file));
      for (const auto& name : dir.entries())
        torn_temporaries += name != "model.safetensors";
      // A whole state: every element holds the same save's value, the last round's or newer
      // (this writer started at last + 1).
      restore_checkpoint(s, file);
      const auto v = s.read(big);
      const float first = v[0];
      CHECK(first >= last);
      CHECK(std::all_of(v.begin(), v.end(), [&](float e) { return e == first; }));
      last = first;
      // the restore removed the killed writer's temporary
      CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
    }
    MESSAGE("killed mid-save (a temporary left behind) in " << torn_temporaries << " of 50 rounds");
  }
}
