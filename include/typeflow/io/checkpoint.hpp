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
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/compiled.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"

// nlohmann-json only where the bodies are compiled: a translation unit of a program built with
// TYPEFLOW_SEPARATE_COMPILATION that does not include <typeflow/src.hpp> skips its 3-4 s of
// parsing (core/compiled.hpp).
#if TYPEFLOW_BODIES
#include <nlohmann/json.hpp>
#endif

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
                                             {dtype_name<bool>, "BOOL", sizeof(bool)},
                                             {dtype_name<bfloat16>, "BF16", 2},
                                             {dtype_name<float16>, "F16", 2}};
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

// ---- JSON (nlohmann-json), held to what a safetensors header uses ----------------------------
#if TYPEFLOW_BODIES

/// Header text for an error message: bytes that are not printable ASCII as \xNN, at most 300
/// bytes of it.
inline std::string printable(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string r;
  std::size_t i = 0;
  for (; i < s.size() && r.size() < 300; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      r += static_cast<char>(c);
    } else {
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
    }
  }
  return i < s.size() ? r + "..." : r;
}

/// Builds a safetensors header's DOM from nlohmann's SAX events, strictly. On top of nlohmann's
/// RFC 8259 parser it refuses duplicate keys (nlohmann would keep the last) and what a safetensors
/// header never holds: true, false, null, numbers other than 64-bit integers, nesting deeper than
/// max_json_depth. Every error is a typeflow::error starting with `prefix`. (Not nlohmann's
/// callback parser: it rescans the parent at the end of every object, quadratic in the tensors.)
template <class json>
class header_builder {
public:
  header_builder(std::string prefix, std::vector<std::string>& top_keys)
      : prefix_(std::move(prefix)), top_keys_(top_keys) {}

  json root;

  error fail(const std::string& what) const {
    return error(prefix_ + "header is not valid JSON: " + what);
  }
  error fail_at(const std::string& what, std::size_t at) const {
    return fail(what + " at byte " + std::to_string(at) + " of the header");
  }

  // The SAX interface of nlohmann::json::sax_parse.
  bool null() { throw fail("true, false and null are not used in safetensors headers"); }
  bool boolean(bool) { return null(); }
  bool number_integer(json::number_integer_t v) {
    add(v);
    return true;
  }
  bool number_unsigned(json::number_unsigned_t v) {
    add(v);
    return true;
  }
  bool number_float(json::number_float_t, const json::string_t& text) {
    if (text.find_first_of(".eE") == text.npos)
      throw fail("integer too large: " + printable(text));
    throw fail("only integers are used in safetensors headers, found " + printable(text));
  }
  bool string(json::string_t& s) {
    add(std::move(s));
    return true;
  }
  bool binary(json::binary_t&) { throw fail("binary values are not used in safetensors headers"); }
  bool start_object(std::size_t) {
    open(json::object());
    return true;
  }
  bool key(json::string_t& k) {
    const auto [at, inserted] =
        open_.back()->template get_ref<typename json::object_t&>().emplace(k, nullptr);
    if (!inserted)
      throw fail("duplicate key " + quote_name(k));
    if (open_.size() == 1)
      top_keys_.push_back(k);
    slot_ = &at->second;
    return true;
  }
  bool end_object() {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    open(json::array());
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t byte, const std::string&, const json::exception& e) {
    // what(): "[json.exception.parse_error.101] parse error at line 1, column 26: <what>";
    // `byte` counts the offending character from 1.
    const std::string_view what = e.what();
    const auto colon = what.find(": ");
    throw fail_at(printable(colon == what.npos ? what : what.substr(colon + 2)),
                  byte > 0 ? byte - 1 : 0);
  }

private:
  std::string prefix_;
  std::vector<std::string>& top_keys_;
  std::vector<json*> open_; ///< the objects and arrays being parsed, innermost last
  json* slot_ = nullptr;    ///< the value of the last key of the innermost object

  json* add(json v) {
    if (open_.empty())
      return &(root = std::move(v));
    if (auto& parent = *open_.back(); parent.is_array()) {
      auto& items = parent.template get_ref<typename json::array_t&>();
      items.push_back(std::move(v));
      return &items.back(); // stable while it is open: nothing is added to `items` meanwhile
    }
    return &(*slot_ = std::move(v));
  }
  void open(json v) {
    if (open_.size() >= static_cast<std::size_t>(max_json_depth))
      throw fail("nesting deeper than " + std::to_string(max_json_depth) + " levels");
    open_.push_back(add(std::move(v)));
  }
};

/// Parses a safetensors header (see header_builder); `top_keys` gets the keys of the top-level
/// object in header order.
TYPEFLOW_INLINE_DEFERRED nlohmann::json parse_header(const std::string& header,
                                                     const std::string& prefix,
                                                     std::vector<std::string>& top_keys) {
  header_builder<nlohmann::json> b(prefix, top_keys);
  // nlohmann takes a NUL byte for the end of the input and skips a leading byte-order mark.
  if (const auto at = header.find('\0'); at != std::string::npos)
    throw b.fail_at("unexpected byte 0x00", at);
  if (header.starts_with("\xef\xbb\xbf"))
    throw b.fail_at("unexpected byte-order mark", 0);
  try {
    // nlohmann::json::sax_parse takes the input format at run time, so it compiles a reader of
    // every binary format (CBOR, MessagePack, UBJSON, BJData, BSON) beside the JSON parser: tens
    // of KB of code and seconds of g++ -O2 in every translation unit reading checkpoints. Its
    // JSON branch is this call (nlohmann's detail::parser, this constructor since 3.9).
    auto in = nlohmann::detail::input_adapter(header);
    nlohmann::detail::parser<nlohmann::json, decltype(in)>(std::move(in), nullptr, true, false)
        .sax_parse(&b, true);
  } catch (const nlohmann::json::exception& e) {
    throw b.fail(printable(e.what()));
  }
  return std::move(b.root);
}
#endif // TYPEFLOW_BODIES

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

/// Removes `<file>.tmp.<pid>` files left next to `file` by writers that died mid-save (a
/// SIGKILL, a power cut): only those whose process no longer exists (kill(pid, 0) says ESRCH),
/// so a live process's temporary is never touched. Best-effort: a file that cannot be removed
/// stays. Returns how many were removed.
TYPEFLOW_DECL_DEFERRED std::size_t remove_stale_temporaries(const fs::path& file)
#if TYPEFLOW_BODIES
{
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  const std::string stem = file.filename().string() + ".tmp.";
  std::size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= stem.size() || name.compare(0, stem.size(), stem) != 0)
      continue;
    const std::string digits = name.substr(stem.size());
    if (digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const auto pid = static_cast<::pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue; // alive, or not ours to judge (EPERM: another user's live process)
    std::error_code rec;
    if (fs::is_regular_file(it->symlink_status(rec)) && fs::remove(it->path(), rec))
      ++removed;
  }
  return removed;
}
#else
    ;
#endif

/// Writes `ts` as a safetensors file, crash-safely: temp file `<file>.tmp.<pid>` in the same
/// directory, fsync, atomic rename over `file`, fsync of the directory. On failure `file` is left
/// as it was and the temporary removed; temporaries of dead writers are removed first (see
/// remove_stale_temporaries). (Two threads of one process must not save to the same `file` at
/// once.)
TYPEFLOW_DECL_DEFERRED void write_file(const fs::path& file, std::span<const tensor_ref> ts,
                                       const std::map<std::string, std::string>& metadata,
                                       std::string_view what)
#if TYPEFLOW_BODIES
{
  const std::string prefix = std::string(what) + " " + file.string() + ": ";

  // Validate and build the header: "__metadata__" first, then the tensors in data order, each
  // as {"dtype", "shape", "data_offsets"} (ordered_json keeps that order). The top-level entries
  // are joined here: ordered_json finds a key by a linear search, n^2 for n tensors.
  std::string header = "{";
  const auto add_entry = [&](const std::string& key, const nlohmann::ordered_json& value) {
    if (header.size() > 1)
      header += ',';
    try {
      header += nlohmann::ordered_json(key).dump();
      header += ':';
      header += value.dump();
    } catch (const nlohmann::json::exception& e) {
      throw error(prefix + "cannot write the header: " + e.what());
    }
  };
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      if (!valid_utf8(k) || !valid_utf8(v))
        throw error(prefix + "metadata entry " + quote_name(k) + " is not valid UTF-8");
      meta[k] = v;
    }
    add_entry("__metadata__", meta);
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
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(d->st_name);
    entry["shape"] = dims;
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + n});
    add_entry(std::string(t.name), entry);
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

  remove_stale_temporaries(file);
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
#else
    ;
#endif

/// Reads and fully validates a safetensors file; tensors come in the order of their data.
TYPEFLOW_DECL_DEFERRED std::vector<st_tensor>
read_file(const fs::path& file, std::map<std::string, std::string>* metadata, std::string_view what)
#if TYPEFLOW_BODIES
{
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

  std::vector<std::string> top_keys; // in header order
  const nlohmann::json root = parse_header(header, prefix + "damaged: ", top_keys);
  if (!root.is_object())
    throw error(prefix + "damaged: the header is not a JSON object");

  struct entry {
    st_tensor t;
    std::uint64_t begin, end;
    std::size_t order; ///< place in the header
  };
  std::vector<entry> entries;
  std::map<std::string, std::string> meta;
  const auto bad = [&](const std::string& which, const std::string& why) -> error {
    return error(prefix + "damaged: " + which + " " + why);
  };
  // A non-negative integer: nlohmann parses one without a minus sign as unsigned (-0 is signed).
  const auto natural = [](const nlohmann::json& e) { return e.is_number_unsigned(); };
  for (const std::string& key : top_keys) {
    const nlohmann::json& v = *root.find(key);
    if (key == "__metadata__") {
      if (!v.is_object())
        throw bad("\"__metadata__\"", "is not an object");
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it->is_string())
          throw bad("metadata entry " + quote_name(it.key()), "is not a string");
        meta.emplace(it.key(), it->get<std::string>());
      }
      continue;
    }
    const std::string which = "tensor " + quote_name(key);
    if (!v.is_object())
      throw bad(which, "is not a JSON object");
    for (auto it = v.begin(); it != v.end(); ++it)
      if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
        throw bad(which, "has unknown field " + quote_name(it.key()));
    const auto dt = v.find("dtype"), shape = v.find("shape"), offsets = v.find("data_offsets");
    if (dt == v.end() || shape == v.end() || offsets == v.end())
      throw bad(which, std::string("lacks the field ") + (dt == v.end()      ? "\"dtype\""
                                                          : shape == v.end() ? "\"shape\""
                                                                             : "\"data_offsets\""));
    if (!dt->is_string())
      throw bad(which, "has a dtype that is not a string");
    const std::string& dt_name = dt->get_ref<const std::string&>();
    const dtype_info* d = by_st_name(dt_name);
    if (!d)
      throw bad(which,
                "has dtype " + quote_name(dt_name) +
                    ", which typeflow does not support (F32, F64, I32, I64, BOOL, BF16, F16)");
    if (!shape->is_array())
      throw bad(which, "has a shape that is not an array");
    std::vector<std::uint64_t> dims;
    st_tensor t;
    for (const nlohmann::json& e : *shape) {
      if (!natural(e) || e.get<std::uint64_t>() >
                             static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw bad(which, "has a shape extent that is not a non-negative integer");
      dims.push_back(e.get<std::uint64_t>());
      t.shape.push_back(static_cast<std::int64_t>(dims.back()));
    }
    if (!offsets->is_array() || offsets->size() != 2 || !natural((*offsets)[0]) ||
        !natural((*offsets)[1]))
      throw bad(which, "has data_offsets that are not two non-negative integers");
    const auto begin = (*offsets)[0].get<std::uint64_t>(), end = (*offsets)[1].get<std::uint64_t>();
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
    entries.push_back(entry{std::move(t), begin, end, entries.size()});
  }

  // The tensors must tile the data exactly: no gaps, no overlaps, nothing after the last one.
  // Tensors at one place (zero-size ones) stay in header order. (std::sort with the header
  // order as the last key: libstdc++'s stable_sort uses get_temporary_buffer, which clang
  // warns about as deprecated in C++26 mode.)
  std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
    if (a.begin != b.begin)
      return a.begin < b.begin;
    return a.end != b.end ? a.end < b.end : a.order < b.order;
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
#else
    ;
#endif

} // namespace detail

/// Writes `ts` (data laid out in the given order) and `metadata` as a safetensors file,
/// crash-safely (temporary file, fsync, atomic rename). Throws typeflow::error; on failure a
/// previous `file` is intact. The directory of `file` must exist.
TYPEFLOW_INLINE_DEFERRED void
write_safetensors(const std::filesystem::path& file, const std::vector<st_tensor>& ts,
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
TYPEFLOW_INLINE_DEFERRED std::vector<st_tensor>
read_safetensors(const std::filesystem::path& file,
                 std::map<std::string, std::string>* metadata = nullptr) {
  return detail::read_file(file, metadata, "safetensors");
}

} // namespace io

namespace io::detail {

/// restore_checkpoint's work, one function for every session type: the file is read and
/// validated against the session's variables `vars` (in name order) and, only when every one
/// matches, variable i's bytes are copied into `dest[i]`.
TYPEFLOW_DECL_DEFERRED void restore_variables(const fs::path& file,
                                              std::span<const tensor_ref> vars,
                                              std::span<void* const> dest)
#if TYPEFLOW_BODIES
{
  remove_stale_temporaries(file);
  const std::vector<st_tensor> ts = read_file(file, nullptr, "checkpoint");
  std::map<std::string_view, const st_tensor*> by_name;
  for (const auto& t : ts)
    by_name.emplace(t.name, &t);

  std::vector<std::string> problems;
  std::set<std::string_view> matched;
  for (const tensor_ref& v : vars) {
    const std::string which = "variable " + quote_name(v.name);
    const auto it = by_name.find(v.name);
    if (it == by_name.end()) {
      problems.push_back(which + " (" + std::string(v.dtype) + " " + shape_string(v.shape) +
                         ") is missing from the file");
      continue;
    }
    matched.insert(it->first);
    const st_tensor& t = *it->second;
    if (t.dtype != v.dtype)
      problems.push_back(which + " is " + std::string(v.dtype) + " in the session but " + t.dtype +
                         " in the file");
    else if (!std::ranges::equal(t.shape, v.shape))
      problems.push_back(which + " has shape " + shape_string(v.shape) + " in the session but " +
                         shape_string(t.shape) + " in the file");
    else if (t.bytes.size() != v.bytes)
      problems.push_back(which + " has " + std::to_string(v.bytes) + " bytes in the session but " +
                         std::to_string(t.bytes.size()) + " in the file");
  }
  for (const auto& t : ts)
    if (!matched.count(t.name))
      problems.push_back("the file has tensor " + quote_name(t.name) + " (" + t.dtype + " " +
                         shape_string(t.shape) + "), which is not a variable of the session" +
                         (vars.empty() ? " (the session has no variables yet: run or "
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
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (vars[i].bytes > 0)
      std::memcpy(dest[i], by_name.at(vars[i].name)->bytes.data(), vars[i].bytes);
}
#else
    ;
#endif

/// Every variable of session `s`, in name order (`dest`: their writable storage).
template <class Session>
std::vector<tensor_ref> session_variables(Session& s, std::vector<void*>* dest = nullptr) {
  std::vector<tensor_ref> refs;
  refs.reserve(s.variable_count());
  s.for_each_variable([&](const auto& v) {
    refs.push_back({v.name, v.dtype, v.dims, v.data, v.bytes});
    if (dest)
      dest->push_back(v.data);
  });
  return refs;
}

} // namespace io::detail

/// Saves every variable of `s` to `file` (safetensors, metadata {"format": "typeflow"}). Crash-
/// safe: a temporary file next to `file` is fsynced and renamed over it, so `file` holds either
/// the old or the new checkpoint. Throws typeflow::error; the directory must exist. A session
/// replicated across processes writes on rank 0 only (the ranks hold the same variables).
template <class Session>
void save_checkpoint(Session& s, const std::filesystem::path& file) {
  if constexpr (requires { s.rank(); })
    if (s.rank() != 0)
      return;
  io::detail::write_file(file, io::detail::session_variables(s), {{"format", "typeflow"}},
                         "checkpoint");
}

/// Restores every variable of `s` from `file`. All or nothing: the file is read and validated
/// first, then every variable must be in it with the same dtype and shape and the file must hold
/// nothing else; only then are the variables overwritten. Throws typeflow::error otherwise,
/// leaving the variables untouched. Temporaries next to `file` left by dead writers are removed.
template <class Session>
void restore_checkpoint(Session& s, const std::filesystem::path& file) {
  std::vector<void*> dest;
  const std::vector<io::detail::tensor_ref> vars = io::detail::session_variables(s, &dest);
  io::detail::restore_variables(file, vars, dest);
}

} // namespace typeflow
