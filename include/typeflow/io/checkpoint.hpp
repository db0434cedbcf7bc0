// Checkpoints: a session's variables saved to and restored from a safetensors file
// (https://github.com/huggingface/safetensors), with a crash-safe writer and a strict reader.
#pragma once
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/dtype.hpp"
#include "../core/error.hpp"

namespace typeflow {

static_assert(std::endian::native == std::endian::little,
              "typeflow/io/checkpoint.hpp: safetensors files are little-endian and typeflow "
              "writes its tensors' memory as is, so it needs a little-endian host");

namespace io {

/// One tensor of a safetensors file: `dtype` is typeflow's name ("float32", "float64", "int32",
/// "int64" or "bool"), `bytes` the dense row-major little-endian data.
struct st_tensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
};

namespace detail {

namespace fs = std::filesystem;

/// Headers longer than this are rejected as damaged (the reference implementation's limit).
inline constexpr std::uint64_t max_header_bytes = 100'000'000;
/// JSON nesting deeper than this is rejected (a safetensors header needs 3 levels).
inline constexpr int max_json_depth = 64;

struct dtype_info {
  std::string_view typeflow_name;
  std::string_view st_name;
  std::size_t size;
};
inline constexpr dtype_info dtype_table[] = {{dtype_name<float>, "F32", 4},
                                             {dtype_name<double>, "F64", 8},
                                             {dtype_name<std::int32_t>, "I32", 4},
                                             {dtype_name<std::int64_t>, "I64", 8},
                                             {dtype_name<bool>, "BOOL", sizeof(bool)}};
static_assert(sizeof(bool) == 1, "typeflow/io/checkpoint.hpp: safetensors BOOL is one byte");

inline const dtype_info* by_typeflow_name(std::string_view n) {
  for (const auto& d : dtype_table)
    if (d.typeflow_name == n)
      return &d;
  return nullptr;
}
inline const dtype_info* by_st_name(std::string_view n) {
  for (const auto& d : dtype_table)
    if (d.st_name == n)
      return &d;
  return nullptr;
}

inline std::string shape_string(std::span<const std::int64_t> s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i)
    (r += i ? ", " : "", r += std::to_string(s[i]));
  return r + "]";
}

inline std::string quote_name(std::string_view s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
    } else {
      r += static_cast<char>(c);
    }
  }
  return r + "\"";
}

inline std::string errno_text(int e) {
  return std::error_code(e, std::generic_category()).message();
}

/// Length of the valid UTF-8 sequence starting at s[i], or 0 if there is none.
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80)
    return 1;
  std::size_t n;
  std::uint32_t cp, min;
  if ((c & 0xe0) == 0xc0)
    n = 2, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0)
    n = 3, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0)
    n = 4, cp = c & 0x07, min = 0x10000;
  else
    return 0;
  if (s.size() - i < n)
    return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

inline bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

// ---- JSON: the subset a safetensors header uses (objects, arrays, strings, integers) ---------

struct json {
  enum class kind { object, array, string, integer };
  kind k = kind::object;
  std::size_t offset = 0;        ///< byte offset of the value in the header
  std::string str;               ///< string
  std::uint64_t magnitude = 0;   ///< integer: absolute value
  bool negative = false;         ///< integer: sign
  std::vector<std::string> keys; ///< object: keys, in order (unique)
  std::vector<json> values;      ///< object: values; array: items
};

/// Strict parser; every error is a typeflow::error naming the byte offset in the header.
class json_parser {
public:
  json_parser(std::string_view text, std::string prefix) : s_(text), prefix_(std::move(prefix)) {}

  json parse_document() {
    skip_ws();
    json v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size())
      fail("unexpected " + describe(pos_) + " after the end of the JSON value", pos_);
    return v;
  }

private:
  std::string_view s_;
  std::string prefix_;
  std::size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what, std::size_t at) const {
    throw error(prefix_ + "header is not valid JSON: " + what + " at byte " + std::to_string(at) +
                " of the header");
  }
  std::string describe(std::size_t at) const {
    if (at >= s_.size())
      return "end of header";
    const auto c = static_cast<unsigned char>(s_[at]);
    if (c >= 0x20 && c < 0x7f)
      return std::string("character '") + static_cast<char>(c) + "'";
    static constexpr char hex[] = "0123456789abcdef";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
  }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c)
      fail(std::string("expected '") + c + "', found " + describe(pos_), pos_);
    ++pos_;
  }

  json parse_value(int depth) {
    if (pos_ >= s_.size())
      fail("unexpected end of header", pos_);
    switch (s_[pos_]) {
    case '{':
      return parse_object(depth);
    case '[':
      return parse_array(depth);
    case '"': {
      json v;
      v.k = json::kind::string;
      v.offset = pos_;
      v.str = parse_string();
      return v;
    }
    default:
      if (s_[pos_] == '-' || (s_[pos_] >= '0' && s_[pos_] <= '9'))
        return parse_integer();
      if (s_.substr(pos_, 4) == "true" || s_.substr(pos_, 5) == "false" ||
          s_.substr(pos_, 4) == "null")
        fail("true, false and null are not used in safetensors headers", pos_);
      fail("expected a value, found " + describe(pos_), pos_);
    }
  }

  json parse_object(int depth) {
    if (depth >= max_json_depth)
      fail("nesting deeper than " + std::to_string(max_json_depth) + " levels", pos_);
    json v;
    v.k = json::kind::object;
    v.offset = pos_;
    expect('{');
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return v;
    }
    std::set<std::string> seen;
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"')
        fail("expected a string key, found " + describe(pos_), pos_);
      const std::size_t key_at = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second)
        fail("duplicate key " + quote_name(key), key_at);
      skip_ws();
      expect(':');
      skip_ws();
      v.keys.push_back(std::move(key));
      v.values.push_back(parse_value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return v;
      }
      fail("expected ',' or '}', found " + describe(pos_), pos_);
    }
  }

  json parse_array(int depth) {
    if (depth >= max_json_depth)
      fail("nesting deeper than " + std::to_string(max_json_depth) + " levels", pos_);
    json v;
    v.k = json::kind::array;
    v.offset = pos_;
    expect('[');
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return v;
    }
    for (;;) {
      skip_ws();
      v.values.push_back(parse_value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return v;
      }
      fail("expected ',' or ']', found " + describe(pos_), pos_);
    }
  }

  json parse_integer() {
    json v;
    v.k = json::kind::integer;
    v.offset = pos_;
    if (s_[pos_] == '-') {
      v.negative = true;
      ++pos_;
    }
    const std::size_t digits = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const auto d = static_cast<std::uint64_t>(s_[pos_] - '0');
      if (v.magnitude > (std::numeric_limits<std::uint64_t>::max() - d) / 10)
        fail("integer too large", v.offset);
      v.magnitude = v.magnitude * 10 + d;
      ++pos_;
    }
    if (pos_ == digits)
      fail("expected a digit, found " + describe(pos_), pos_);
    if (s_[digits] == '0' && pos_ - digits > 1)
      fail("leading zero in integer", v.offset);
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E'))
      fail("only integers are used in safetensors headers, found a fraction or exponent", pos_);
    return v;
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4)
      fail("truncated \\u escape", pos_);
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = s_[pos_];
      u <<= 4;
      if (c >= '0' && c <= '9')
        u |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        u |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        u |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("invalid hex digit in \\u escape", pos_);
    }
    return u;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string parse_string() {
    const std::size_t start = pos_;
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size())
        fail("unterminated string", start);
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20)
        fail("unescaped control character in string", pos_);
      if (c >= 0x80) {
        const std::size_t n = utf8_sequence(s_, pos_);
        if (n == 0)
          fail("invalid UTF-8", pos_);
        out.append(s_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      const std::size_t esc = pos_++;
      if (pos_ >= s_.size())
        fail("unterminated string", start);
      switch (s_[pos_++]) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case '/':
        out += '/';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        std::uint32_t cp = hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff)
          fail("unpaired low surrogate in \\u escape", esc);
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (s_.size() - pos_ < 2 || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
            fail("unpaired high surrogate in \\u escape", esc);
          pos_ += 2;
          const std::uint32_t lo = hex4();
          if (lo < 0xdc00 || lo > 0xdfff)
            fail("unpaired high surrogate in \\u escape", esc);
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        fail("invalid escape sequence", esc);
      }
    }
  }
};

inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
}

// ---- files -----------------------------------------------------------------------------------

/// Owns a POSIX file descriptor.
class fd_guard {
public:
  explicit fd_guard(int fd) : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  int get() const { return fd_; }
  /// Closes now; returns 0 or the errno of a failed close.
  int close() {
    const int fd = std::exchange(fd_, -1);
    return fd >= 0 && ::close(fd) != 0 ? errno : 0;
  }

private:
  int fd_;
};

/// Reads exactly `n` bytes; returns 0, -1 at end of file, or an errno.
inline int read_fully(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ::ssize_t r = ::read(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (r == 0)
      return -1;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return 0;
}

/// Writes exactly `n` bytes; returns 0 or an errno.
inline int write_fully(int fd, const void* buf, std::size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ::ssize_t r = ::write(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (r == 0)
      return EIO;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return 0;
}

/// A tensor to write, referring to memory owned elsewhere.
struct tensor_ref {
  std::string_view name;
  std::string_view dtype; ///< typeflow dtype name
  std::span<const std::int64_t> shape;
  const void* data;
  std::size_t bytes;
};

/// Number of elements, or false on overflow of `size * numel` bytes.
inline bool byte_count(std::span<const std::uint64_t> dims, std::size_t elem, std::uint64_t& out) {
  for (auto d : dims)
    if (d == 0) {
      out = 0;
      return true;
    }
  std::uint64_t n = elem;
  for (auto d : dims) {
    if (n > std::numeric_limits<std::uint64_t>::max() / d)
      return false;
    n *= d;
  }
  out = n;
  return true;
}

/// Writes `ts` as a safetensors file, crash-safely: temp file `<file>.tmp.<pid>` in the same
/// directory, fsync, atomic rename over `file`, fsync of the directory. On failure `file` is left
/// as it was. (Two threads of one process must not save to the same `file` at once.)
inline void write_file(const fs::path& file, std::span<const tensor_ref> ts,
                       const std::map<std::string, std::string>& metadata, std::string_view what) {
  const std::string prefix = std::string(what) + " " + file.string() + ": ";

  // Validate and build the header.
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!valid_utf8(k) || !valid_utf8(v))
        throw error(prefix + "metadata entry " + quote_name(k) + " is not valid UTF-8");
      if (!first)
        header += ',';
      first = false;
      append_json_string(header, k);
      header += ':';
      append_json_string(header, v);
    }
    header += '}';
  }
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const auto& t : ts) {
    const std::string which = "tensor " + quote_name(t.name);
    if (t.name == "__metadata__")
      throw error(prefix + "a tensor cannot be named \"__metadata__\"");
    if (!valid_utf8(t.name))
      throw error(prefix + which + ": the name is not valid UTF-8");
    if (!names.insert(t.name).second)
      throw error(prefix + which + " is given twice");
    const dtype_info* d = by_typeflow_name(t.dtype);
    if (!d)
      throw error(prefix + which + " has unknown dtype " + quote_name(t.dtype) +
                  " (expected float32, float64, int32, int64 or bool)");
    std::vector<std::uint64_t> dims;
    for (auto e : t.shape) {
      if (e < 0)
        throw error(prefix + which + " has a negative extent in shape " + shape_string(t.shape));
      dims.push_back(static_cast<std::uint64_t>(e));
    }
    std::uint64_t n = 0;
    if (!byte_count(dims, d->size, n))
      throw error(prefix + which + " has shape " + shape_string(t.shape) + ", which is too large");
    if (n != t.bytes)
      throw error(prefix + which + " has " + std::to_string(t.bytes) + " bytes of data, but " +
                  std::string(t.dtype) + " " + shape_string(t.shape) + " needs " +
                  std::to_string(n));
    if (header.size() > 1)
      header += ',';
    append_json_string(header, t.name);
    header += ":{\"dtype\":\"";
    header += d->st_name;
    header += "\",\"shape\":[";
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (i)
        header += ','; // (not `"," + to_string(...)`: g++ 12 -O3 warns, PR105329)
      header += std::to_string(dims[i]);
    }
    header +=
        "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    offset += n;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' '); // the data starts 8-byte aligned
  const std::uint64_t header_len = header.size();

  // The destination's directory must exist; it is not created.
  if (file.filename().empty())
    throw error(prefix + "not a file name");
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw error(prefix + "directory " + dir.string() + " does not exist");
  }

  fs::path tmp = file;
  tmp += ".tmp." + std::to_string(::getpid());
  const std::string tmp_name = tmp.string();
  fd_guard fd(
      ::open(tmp_name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (fd.get() < 0)
    throw error(prefix + "cannot create temporary file " + tmp_name + ": " + errno_text(errno));
  struct remove_on_failure {
    const fs::path& p;
    bool armed = true;
    ~remove_on_failure() {
      if (armed) {
        std::error_code ec;
        fs::remove(p, ec);
      }
    }
  } cleanup{tmp};
  const auto check = [&](int e, const char* doing) {
    if (e != 0)
      throw error(prefix + "cannot " + doing + " temporary file " + tmp_name + ": " +
                  errno_text(e));
  };
  check(write_fully(fd.get(), &header_len, 8), "write");
  check(write_fully(fd.get(), header.data(), header.size()), "write");
  for (const auto& t : ts)
    if (t.bytes > 0)
      check(write_fully(fd.get(), t.data, t.bytes), "write");
  check(::fsync(fd.get()) != 0 ? errno : 0, "fsync");
  check(fd.close(), "close");
  {
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec)
      throw error(prefix + "cannot rename " + tmp_name + " to " + file.string() + ": " +
                  ec.message());
  }
  cleanup.armed = false;
  // Make the rename durable; best-effort (some file systems refuse fsync on directories).
  const int dfd = ::open(dir.string().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

/// Reads and fully validates a safetensors file; tensors come in the order of their data.
inline std::vector<st_tensor> read_file(const fs::path& file,
                                        std::map<std::string, std::string>* metadata,
                                        std::string_view what) {
  const std::string prefix = std::string(what) + " " + file.string() + ": ";
  const std::string name = file.string();
  // O_NONBLOCK: opening a FIFO must not hang (it is refused below as not a regular file).
  fd_guard fd(::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0)
    throw error(prefix + "cannot open: " + errno_text(errno));
  struct ::stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw error(prefix + "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode))
    throw error(prefix + "not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  const auto read_or_throw = [&](void* buf, std::size_t n) {
    const int e = read_fully(fd.get(), buf, n);
    if (e == -1)
      throw error(prefix + "the file ended early (did it change while being read?)");
    if (e != 0)
      throw error(prefix + "cannot read: " + errno_text(e));
  };

  if (file_size < 8)
    throw error(prefix + "damaged: the file is " + std::to_string(file_size) +
                " bytes, too short for the 8-byte header length of a safetensors file");
  std::uint64_t header_len = 0;
  read_or_throw(&header_len, 8);
  if (header_len > max_header_bytes)
    throw error(prefix + "damaged: header length " + std::to_string(header_len) +
                " is absurd (the limit is " + std::to_string(max_header_bytes) + " bytes)");
  if (header_len > file_size - 8)
    throw error(prefix + "damaged: header length " + std::to_string(header_len) + " exceeds the " +
                std::to_string(file_size - 8) + " bytes that follow the length field");
  std::string header(static_cast<std::size_t>(header_len), '\0');
  read_or_throw(header.data(), header.size());
  const std::uint64_t data_len = file_size - 8 - header_len;

  const json root = json_parser(header, prefix + "damaged: ").parse_document();
  if (root.k != json::kind::object)
    throw error(prefix + "damaged: the header is not a JSON object");

  struct entry {
    st_tensor t;
    std::uint64_t begin, end;
  };
  std::vector<entry> entries;
  std::map<std::string, std::string> meta;
  const auto bad = [&](const std::string& which, const std::string& why) -> error {
    return error(prefix + "damaged: " + which + " " + why);
  };
  for (std::size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& key = root.keys[i];
    const json& v = root.values[i];
    if (key == "__metadata__") {
      if (v.k != json::kind::object)
        throw bad("\"__metadata__\"", "is not an object");
      for (std::size_t j = 0; j < v.keys.size(); ++j) {
        if (v.values[j].k != json::kind::string)
          throw bad("metadata entry " + quote_name(v.keys[j]), "is not a string");
        meta.emplace(v.keys[j], v.values[j].str);
      }
      continue;
    }
    const std::string which = "tensor " + quote_name(key);
    if (v.k != json::kind::object)
      throw bad(which, "is not a JSON object");
    const json* dt = nullptr;
    const json* shape = nullptr;
    const json* offsets = nullptr;
    for (std::size_t j = 0; j < v.keys.size(); ++j) {
      if (v.keys[j] == "dtype")
        dt = &v.values[j];
      else if (v.keys[j] == "shape")
        shape = &v.values[j];
      else if (v.keys[j] == "data_offsets")
        offsets = &v.values[j];
      else
        throw bad(which, "has unknown field " + quote_name(v.keys[j]));
    }
    if (!dt || !shape || !offsets)
      throw bad(which, std::string("lacks the field ") + (!dt      ? "\"dtype\""
                                                          : !shape ? "\"shape\""
                                                                   : "\"data_offsets\""));
    if (dt->k != json::kind::string)
      throw bad(which, "has a dtype that is not a string");
    const dtype_info* d = by_st_name(dt->str);
    if (!d)
      throw bad(which, "has dtype " + quote_name(dt->str) +
                           ", which typeflow does not support (F32, F64, I32, I64, BOOL)");
    if (shape->k != json::kind::array)
      throw bad(which, "has a shape that is not an array");
    std::vector<std::uint64_t> dims;
    st_tensor t;
    for (const json& e : shape->values) {
      if (e.k != json::kind::integer || e.negative ||
          e.magnitude > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw bad(which, "has a shape extent that is not a non-negative integer");
      dims.push_back(e.magnitude);
      t.shape.push_back(static_cast<std::int64_t>(e.magnitude));
    }
    if (offsets->k != json::kind::array || offsets->values.size() != 2 ||
        offsets->values[0].k != json::kind::integer || offsets->values[0].negative ||
        offsets->values[1].k != json::kind::integer || offsets->values[1].negative)
      throw bad(which, "has data_offsets that are not two non-negative integers");
    const std::uint64_t begin = offsets->values[0].magnitude, end = offsets->values[1].magnitude;
    if (begin > end || end > data_len)
      throw bad(which, "has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                           "] outside the " + std::to_string(data_len) + " bytes of data");
    std::uint64_t n = 0;
    if (!byte_count(dims, d->size, n) || n != end - begin)
      throw bad(which, "has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                           "] that do not fit " + std::string(d->st_name) + " " +
                           shape_string(t.shape));
    t.name = key;
    t.dtype = std::string(d->typeflow_name);
    entries.push_back(entry{std::move(t), begin, end});
  }

  // The tensors must tile the data exactly: no gaps, no overlaps, nothing after the last one.
  std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const entry& e = entries[i];
    if (e.begin < expected)
      throw bad("tensor " + quote_name(e.t.name),
                "overlaps tensor " + quote_name(entries[i - 1].t.name) + " in the data");
    if (e.begin > expected)
      throw error(prefix + "damaged: bytes [" + std::to_string(expected) + ", " +
                  std::to_string(e.begin) + ") of the data belong to no tensor");
    expected = e.end;
  }
  if (expected != data_len)
    throw error(prefix + "damaged: " + std::to_string(data_len - expected) +
                " bytes of trailing data after the last tensor");

  std::vector<st_tensor> out;
  out.reserve(entries.size());
  for (entry& e : entries) {
    e.t.bytes.resize(static_cast<std::size_t>(e.end - e.begin));
    read_or_throw(e.t.bytes.data(), e.t.bytes.size());
    if (e.t.dtype == dtype_name<bool>)
      for (std::size_t k = 0; k < e.t.bytes.size(); ++k)
        if (e.t.bytes[k] > 1)
          throw bad("tensor " + quote_name(e.t.name),
                    "(BOOL) has the byte " + std::to_string(e.t.bytes[k]) + " at element " +
                        std::to_string(k) + "; only 0 and 1 are valid");
    out.push_back(std::move(e.t));
  }
  if (metadata)
    *metadata = std::move(meta);
  return out;
}

} // namespace detail

/// Writes `ts` (data laid out in the given order) and `metadata` as a safetensors file,
/// crash-safely (temporary file, fsync, atomic rename). Throws typeflow::error; on failure a
/// previous `file` is intact. The directory of `file` must exist.
inline void write_safetensors(const std::filesystem::path& file, const std::vector<st_tensor>& ts,
                              const std::map<std::string, std::string>& metadata = {}) {
  std::vector<detail::tensor_ref> refs;
  refs.reserve(ts.size());
  for (const auto& t : ts)
    refs.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  detail::write_file(file, refs, metadata, "safetensors");
}

/// Reads a safetensors file, validating it fully (typeflow::error on anything malformed or on a
/// dtype typeflow lacks). The tensors come in the order their data lie in the file; the
/// `__metadata__` entries go to `*metadata` if given.
inline std::vector<st_tensor>
read_safetensors(const std::filesystem::path& file,
                 std::map<std::string, std::string>* metadata = nullptr) {
  return detail::read_file(file, metadata, "safetensors");
}

} // namespace io

/// Saves every variable of `s` to `file` (safetensors, metadata {"format": "typeflow"}). Crash-
/// safe: a temporary file next to `file` is fsynced and renamed over it, so `file` holds either
/// the old or the new checkpoint. Throws typeflow::error; the directory must exist. A session
/// replicated across processes writes on rank 0 only (the ranks hold the same variables).
template <class Session>
void save_checkpoint(Session& s, const std::filesystem::path& file) {
  if constexpr (requires { s.rank(); })
    if (s.rank() != 0)
      return;
  std::vector<io::detail::tensor_ref> refs;
  refs.reserve(s.variable_count());
  s.for_each_variable([&](const auto& v) {
    refs.push_back({v.name, v.dtype, v.dims, v.data, v.bytes});
  });
  io::detail::write_file(file, refs, {{"format", "typeflow"}}, "checkpoint");
}

/// Restores every variable of `s` from `file`. All or nothing: the file is read and validated
/// first, then every variable must be in it with the same dtype and shape and the file must hold
/// nothing else; only then are the variables overwritten. Throws typeflow::error otherwise,
/// leaving the variables untouched.
template <class Session>
void restore_checkpoint(Session& s, const std::filesystem::path& file) {
  const std::vector<io::st_tensor> ts = io::detail::read_file(file, nullptr, "checkpoint");
  std::map<std::string_view, const io::st_tensor*> by_name;
  for (const auto& t : ts)
    by_name.emplace(t.name, &t);

  std::vector<std::string> problems;
  std::set<std::string_view> matched;
  s.for_each_variable([&](const auto& v) {
    const std::string which = "variable " + io::detail::quote_name(v.name);
    const auto it = by_name.find(v.name);
    if (it == by_name.end()) {
      problems.push_back(which + " (" + std::string(v.dtype) + " " +
                         io::detail::shape_string(v.dims) + ") is missing from the file");
      return;
    }
    matched.insert(it->first);
    const io::st_tensor& t = *it->second;
    if (t.dtype != v.dtype)
      problems.push_back(which + " is " + std::string(v.dtype) + " in the session but " + t.dtype +
                         " in the file");
    else if (!std::ranges::equal(t.shape, v.dims))
      problems.push_back(which + " has shape " + io::detail::shape_string(v.dims) +
                         " in the session but " + io::detail::shape_string(t.shape) +
                         " in the file");
    else if (t.bytes.size() != v.bytes)
      problems.push_back(which + " has " + std::to_string(v.bytes) + " bytes in the session but " +
                         std::to_string(t.bytes.size()) + " in the file");
  });
  for (const auto& t : ts)
    if (!matched.count(t.name))
      problems.push_back("the file has tensor " + io::detail::quote_name(t.name) + " (" + t.dtype +
                         " " + io::detail::shape_string(t.shape) +
                         "), which is not a variable of the session" +
                         (s.variable_count() == 0 ? " (the session has no variables yet: run or "
                                                    "initialize a graph that uses them first)"
                                                  : ""));
  if (!problems.empty()) {
    std::string msg = "checkpoint " + file.string() + ": ";
    constexpr std::size_t shown = 10;
    for (std::size_t i = 0; i < problems.size() && i < shown; ++i)
      msg += (i ? "; " : "") + problems[i];
    if (problems.size() > shown)
      msg += "; and " + std::to_string(problems.size() - shown) + " more problems";
    throw error(msg);
  }
  s.for_each_variable([&](const auto& v) {
    const io::st_tensor& t = *by_name.at(v.name);
    if (v.bytes > 0)
      std::memcpy(v.data, t.bytes.data(), v.bytes);
  });
}

} // namespace typeflow
