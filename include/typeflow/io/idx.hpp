// IDX reader (the MNIST / Fashion-MNIST file format): plain or gzip-compressed files (detected
// by their magic bytes), strict validation whose errors name the file and the byte offset, and
// an MNIST loader with the seed model's preprocessing (pixel p -> p * (1. / 255) - 0.5).
#pragma once

#include "../core/compiled.hpp"
#include "../core/error.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
#include <zlib.h>
#endif

namespace typeflow::data {

/// An IDX file of any element type. `bytes` holds dims[0] * ... * dims[rank-1] elements, each
/// converted from the file's big-endian order to the host's (copy them out with std::memcpy).
struct idx_array {
  std::uint8_t type_code = 0; ///< 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> bytes;
};

/// An IDX file of unsigned bytes (type code 0x08), e.g. MNIST images or labels.
struct idx_u8 {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

/// One MNIST split: `images` holds count * rows * cols preprocessed pixels (row-major, one image
/// after the other), `labels` holds count labels in 0..9.
struct mnist_split {
  std::int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
};

/// Size in bytes of one element of IDX type `type_code`, or 0 if the code is unknown.
constexpr std::size_t idx_element_size(std::uint8_t type_code) noexcept {
  switch (type_code) {
  case 0x08:
  case 0x09:
    return 1;
  case 0x0B:
    return 2;
  case 0x0C:
  case 0x0D:
    return 4;
  case 0x0E:
    return 8;
  default:
    return 0;
  }
}

/// Human-readable name of IDX type `type_code` ("unknown" if the code is unknown).
constexpr const char* idx_type_name(std::uint8_t type_code) noexcept {
  switch (type_code) {
  case 0x08:
    return "unsigned byte";
  case 0x09:
    return "signed byte";
  case 0x0B:
    return "short";
  case 0x0C:
    return "int";
  case 0x0D:
    return "float";
  case 0x0E:
    return "double";
  default:
    return "unknown";
  }
}

/// The seed model's preprocessing, as its read_and_decode: `tf.cast(image, tf.float32) *
/// (1. / 255) - 0.5` in float32, so pixel p in 0..255 becomes p / 255 - 0.5, in [-0.5, 0.5].
inline void preprocess_pixels(const std::uint8_t* in, float* out, std::size_t n) {
  constexpr float scale = static_cast<float>(1.0 / 255.0);
  for (std::size_t i = 0; i < n; ++i) {
    // The float32 product, rounded before the subtraction as TensorFlow's two ops do (computed
    // exactly in double and rounded once, so no compiler can contract it into a fused
    // multiply-add, which would give 255 -> 0.50000006 instead of 0.5).
    const float scaled = static_cast<float>(static_cast<double>(in[i]) * scale);
    out[i] = scaled - 0.5f;
  }
}

namespace detail {

inline constexpr std::size_t idx_max_rank = 8;

[[noreturn]] inline void idx_fail(const std::string& path, const std::string& what) {
  throw error("idx: " + path + ": " + what);
}

inline std::string idx_hex(unsigned v) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string s = "0x";
  s += digits[(v >> 4) & 0xF];
  s += digits[v & 0xF];
  return s;
}

struct idx_file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

/// Sequential byte source over a plain or gzip-compressed file. read() returns fewer bytes than
/// asked only at the end of the (decompressed) data; every I/O or decompression error throws.
/// For gzip input the whole stream is checked (CRC, length, no truncation, no trailing garbage)
/// by the time read() first returns short.
class idx_byte_reader {
public:
  explicit idx_byte_reader(std::string path) : path_(std::move(path)), in_(std::size_t{1} << 16) {
    // O_NONBLOCK: opening a FIFO with no writer must not hang; anything but a regular file is
    // refused before a byte is read.
    errno = 0;
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      const int e = errno;
      idx_fail(path_, "cannot open file: " + std::generic_category().message(e));
    }
    struct ::stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      const bool dir = S_ISDIR(st.st_mode);
      ::close(fd);
      idx_fail(path_, dir ? "cannot open file: it is a directory"
                          : "cannot open file: not a regular file");
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    file_size_ = static_cast<std::uint64_t>(st.st_size);
    file_.reset(::fdopen(fd, "rb"));
    if (!file_) {
      const int e = errno;
      ::close(fd);
      idx_fail(path_, "cannot open file: " + std::generic_category().message(e));
    }
    fill();
    gzip_ = in_len_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
      zs_ = std::make_unique<z_stream>();
      std::memset(zs_.get(), 0, sizeof(z_stream));
      if (inflateInit2(zs_.get(), 16 + MAX_WBITS) != Z_OK) {
        zs_.reset();
        idx_fail(path_, "cannot initialise zlib inflate");
      }
      zs_->next_in = reinterpret_cast<Bytef*>(in_.data());
      zs_->avail_in = static_cast<uInt>(in_len_);
#else
      idx_fail(path_, "file is gzip-compressed (magic bytes 0x1F 0x8B at byte offset 0), but zlib "
                      "support is not compiled in (define TYPEFLOW_HAS_ZLIB=1 and link zlib)");
#endif
    }
  }

  idx_byte_reader(const idx_byte_reader&) = delete;
  idx_byte_reader& operator=(const idx_byte_reader&) = delete;

  ~idx_byte_reader() {
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
    if (zs_)
      inflateEnd(zs_.get());
#endif
  }

  const std::string& path() const noexcept {
    return path_;
  }
  bool gzip() const noexcept {
    return gzip_;
  }
  /// Bytes of (decompressed) data returned so far.
  std::uint64_t offset() const noexcept {
    return out_off_;
  }

  /// "byte offset N" (of the decompressed data, for gzip files).
  /// The file's size in bytes when it was opened (compressed size for gzip input).
  std::uint64_t file_size() const noexcept {
    return file_size_;
  }
  std::string where(std::uint64_t off) const {
    return "byte offset " + std::to_string(off) + (gzip_ ? " of the decompressed data" : "");
  }

  [[noreturn]] void fail(const std::string& what) const {
    idx_fail(path_, what);
  }

  std::size_t read(std::uint8_t* dst, std::size_t n) {
    const std::size_t got = gzip_ ? read_gzip(dst, n) : read_plain(dst, n);
    out_off_ += got;
    return got;
  }

private:
  void fill() {
    in_len_ = std::fread(in_.data(), 1, in_.size(), file_.get());
    in_pos_ = 0;
    if (in_len_ < in_.size() && std::ferror(file_.get())) {
      const int e = errno;
      fail("read error at file byte offset " + std::to_string(file_off_ + in_len_) + ": " +
           (e != 0 ? std::generic_category().message(e) : std::string("I/O error")));
    }
    file_off_ += in_len_;
  }

  std::size_t read_plain(std::uint8_t* dst, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      if (in_pos_ == in_len_) {
        fill();
        if (in_len_ == 0)
          break;
      }
      const std::size_t k = std::min(n - got, in_len_ - in_pos_);
      std::memcpy(dst + got, in_.data() + in_pos_, k);
      in_pos_ += k;
      got += k;
    }
    return got;
  }

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  std::uint64_t compressed_offset() const noexcept {
    return file_off_ - zs_->avail_in;
  }

  void refill_gzip() {
    fill();
    zs_->next_in = reinterpret_cast<Bytef*>(in_.data());
    zs_->avail_in = static_cast<uInt>(in_len_);
  }

  /// A failure at the start of a second (third, ...) gzip member that has produced no output
  /// yet: the bytes after the end of the gzip stream are not another gzip member.
  void fail_if_garbage_after_stream() const {
    if (next_member_at_ != 0 && zs_->total_out == 0)
      fail("unexpected bytes after the end of the gzip stream at compressed byte offset " +
           std::to_string(next_member_at_) + " (corrupt file or trailing garbage)");
  }

  std::size_t read_gzip(std::uint8_t* dst, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      if (member_end_) {
        if (zs_->avail_in == 0)
          refill_gzip();
        if (zs_->avail_in == 0)
          break; // clean end of the last gzip member
        // More input follows: another gzip member (RFC 1952 allows concatenation). Anything
        // else makes inflate fail with "incorrect header check" below.
        if (inflateReset(zs_.get()) != Z_OK)
          fail("zlib inflateReset failed at compressed byte offset " +
               std::to_string(compressed_offset()));
        member_end_ = false;
        next_member_at_ = compressed_offset();
      }
      if (zs_->avail_in == 0) {
        refill_gzip();
        if (zs_->avail_in == 0) {
          fail_if_garbage_after_stream();
          fail("truncated gzip stream at compressed byte offset " +
               std::to_string(compressed_offset()) + " (" + where(out_off_ + got) +
               "): unexpected end of file");
        }
      }
      const std::size_t want = std::min<std::size_t>(n - got, UINT_MAX);
      zs_->next_out = reinterpret_cast<Bytef*>(dst + got);
      zs_->avail_out = static_cast<uInt>(want);
      const int rc = inflate(zs_.get(), Z_NO_FLUSH);
      got += want - zs_->avail_out;
      if (rc == Z_STREAM_END) {
        member_end_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) { // Z_BUF_ERROR: needs input, refilled above
        std::string msg = zs_->msg ? zs_->msg : (rc == Z_MEM_ERROR ? "out of memory" : "error");
        if (rc == Z_NEED_DICT)
          msg = "stream needs a preset dictionary";
        fail_if_garbage_after_stream();
        fail("corrupt gzip stream at compressed byte offset " +
             std::to_string(compressed_offset()) + " (" + where(out_off_ + got) + "): " + msg);
      }
    }
    return got;
  }
#else
  // Unreachable: without zlib the constructor throws for gzip files.
  std::size_t read_gzip(std::uint8_t*, std::size_t) {
    return 0;
  }
#endif

  std::string path_;
  std::unique_ptr<std::FILE, idx_file_closer> file_;
  std::vector<std::uint8_t> in_;
  std::size_t in_len_ = 0, in_pos_ = 0;
  std::uint64_t file_off_ = 0;  ///< bytes of the file read into in_ so far
  std::uint64_t file_size_ = 0; ///< the file's size when it was opened
  std::uint64_t out_off_ = 0;   ///< bytes of data returned by read() so far
  bool gzip_ = false;
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  std::unique_ptr<z_stream> zs_;
  bool member_end_ = false;
  std::uint64_t next_member_at_ = 0; ///< compressed offset of the current member if not the first
#endif
};

/// Reads and validates an IDX file. want_type: required type code (0 = any); want_rank:
/// required rank (0 = any).
TYPEFLOW_DECL_DEFERRED idx_array read_idx_checked(const std::string& path, std::uint8_t want_type,
                                                  std::size_t want_rank)
#if TYPEFLOW_BODIES
{
  idx_byte_reader r(path);
  idx_array out;

  std::uint8_t head[4] = {};
  const std::size_t hgot = r.read(head, 4);
  if (hgot < 4)
    r.fail("truncated header at " + r.where(hgot) + ": expected 4 bytes (magic, type, rank), got " +
           std::to_string(hgot));
  if (head[0] != 0 || head[1] != 0)
    r.fail("bad magic at " + r.where(0) + ": expected 0x00 0x00, got " + idx_hex(head[0]) + " " +
           idx_hex(head[1]) + " (not an IDX file)");
  const std::uint8_t type = head[2];
  const std::size_t esize = idx_element_size(type);
  if (esize == 0)
    r.fail("unknown type code " + idx_hex(type) + " at " + r.where(2) +
           " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  if (want_type != 0 && type != want_type)
    r.fail("type code " + idx_hex(type) + " (" + idx_type_name(type) + ") at " + r.where(2) +
           ", expected " + idx_hex(want_type) + " (" + idx_type_name(want_type) + ")");
  const std::size_t rank = head[3];
  if (rank == 0 || rank > idx_max_rank)
    r.fail("invalid rank " + std::to_string(rank) + " at " + r.where(3) + " (must be 1.." +
           std::to_string(idx_max_rank) + ")");
  if (want_rank != 0 && rank != want_rank)
    r.fail("rank " + std::to_string(rank) + " at " + r.where(3) + ", expected " +
           std::to_string(want_rank));

  std::uint8_t ext[4 * idx_max_rank] = {};
  const std::size_t egot = r.read(ext, 4 * rank);
  if (egot < 4 * rank)
    r.fail("truncated header at " + r.where(4 + egot) + ": expected " + std::to_string(rank) +
           " extents (" + std::to_string(4 * rank) + " bytes), got " + std::to_string(egot) +
           " bytes");
  out.type_code = type;
  out.dims.resize(rank);
  bool any_zero = false;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::uint32_t d = (std::uint32_t{ext[4 * i]} << 24) |
                            (std::uint32_t{ext[4 * i + 1]} << 16) |
                            (std::uint32_t{ext[4 * i + 2]} << 8) | std::uint32_t{ext[4 * i + 3]};
    out.dims[i] = d;
    any_zero = any_zero || d == 0;
  }
  const std::uint64_t header = 4 + 4 * rank;

  // Total size in bytes, checked against overflow (an extent of 0 makes it 0, which is legal).
  constexpr std::uint64_t limit =
      static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::uint64_t total = any_zero ? 0 : esize;
  for (std::size_t i = 0; i < rank && !any_zero; ++i) {
    const auto d = static_cast<std::uint64_t>(out.dims[i]);
    if (total > limit / d) {
      std::string shape;
      for (std::size_t j = 0; j < rank; ++j)
        (shape += j ? " x " : "", shape += std::to_string(out.dims[j]));
      r.fail("total size overflow at " + r.where(4) + ": extents " + shape + " of " +
             std::to_string(esize) + "-byte elements exceed the addressable size");
    }
    total *= d;
  }

  // An uncompressed file must hold what its header claims: checked before reading any of it.
  if (!r.gzip() && header + total > r.file_size())
    r.fail("truncated data at " + r.where(header) + ": expected " + std::to_string(total) +
           " bytes of data, got " +
           std::to_string(r.file_size() - std::min(r.file_size(), header)) +
           " (checked against the file's size before reading)");
  // Data, read in chunks so that a corrupt header cannot make us allocate more than arrives.
  constexpr std::uint64_t chunk = std::uint64_t{1} << 22;
  out.bytes.reserve(
      static_cast<std::size_t>(std::min<std::uint64_t>(total, std::uint64_t{1} << 24)));
  std::uint64_t got = 0;
  while (got < total) {
    const auto want = static_cast<std::size_t>(std::min(total - got, chunk));
    out.bytes.resize(static_cast<std::size_t>(got) + want);
    const std::size_t n = r.read(out.bytes.data() + got, want);
    got += n;
    if (n < want)
      break;
  }
  if (got < total)
    r.fail("truncated data at " + r.where(header) + ": expected " + std::to_string(total) +
           " bytes of data, got " + std::to_string(got));

  // Nothing may follow the data (for gzip files this also checks the CRC and the stream's end).
  std::uint64_t trailing = 0;
  {
    std::uint8_t scratch[4096];
    for (std::size_t n; (n = r.read(scratch, sizeof scratch)) > 0;)
      trailing += n;
  }
  if (trailing > 0)
    r.fail("trailing bytes at " + r.where(header + total) + ": " + std::to_string(trailing) +
           " bytes follow the " + std::to_string(total) +
           " bytes of data the header declares (corrupt file)");

  if constexpr (std::endian::native == std::endian::little) {
    if (esize > 1) {
      std::uint8_t* p = out.bytes.data();
      for (std::uint64_t i = 0; i < total; i += esize)
        for (std::size_t a = 0, b = esize - 1; a < b; ++a, --b)
          std::swap(p[i + a], p[i + b]);
    }
  }
  return out;
}
#else
    ;
#endif

} // namespace detail

/// Reads an IDX file of any element type (plain or gzip-compressed, detected by magic bytes).
/// Throws typeflow::error naming the file and the byte offset on any problem.
inline idx_array read_idx(const std::string& path) {
  return detail::read_idx_checked(path, 0, 0);
}

/// Reads an IDX file that must hold unsigned bytes (type 0x08) of rank `expected_rank` (1..8).
inline idx_u8 read_idx_u8(const std::string& path, std::size_t expected_rank) {
  if (expected_rank == 0 || expected_rank > detail::idx_max_rank)
    throw error("idx: " + path + ": read_idx_u8: expected_rank must be 1.." +
                std::to_string(detail::idx_max_rank) + ", got " + std::to_string(expected_rank));
  idx_array a = detail::read_idx_checked(path, 0x08, expected_rank);
  return idx_u8{std::move(a.dims), std::move(a.bytes)};
}

namespace detail {

/// `dir/name` if it exists, else `dir/name.gz`, else an error naming dir and both candidates.
TYPEFLOW_DECL_DEFERRED std::string mnist_pick(const std::string& dir, const std::string& name)
#if TYPEFLOW_BODIES
{
  namespace fs = std::filesystem;
  const fs::path plain = fs::path(dir) / name;
  const fs::path gz = fs::path(dir) / (name + ".gz");
  std::error_code ec;
  if (fs::exists(plain, ec))
    return plain.string();
  if (fs::exists(gz, ec))
    return gz.string();
  throw error("mnist: " + dir + ": neither " + name + " nor " + name + ".gz exists");
}
#else
    ;
#endif

} // namespace detail

/// Loads the MNIST-format training (train = true: train-*) or test (t10k-*) split from `dir`,
/// preferring the uncompressed files over the .gz ones. Pixels are preprocessed with
/// preprocess_pixels; labels must be 0..9 and match the images in number.
TYPEFLOW_DECL_DEFERRED mnist_split load_mnist(const std::string& dir, bool train)
#if TYPEFLOW_BODIES
{
  const std::string prefix = train ? "train" : "t10k";
  const std::string img_path = detail::mnist_pick(dir, prefix + "-images-idx3-ubyte");
  const std::string lbl_path = detail::mnist_pick(dir, prefix + "-labels-idx1-ubyte");

  const idx_u8 img = read_idx_u8(img_path, 3);
  const idx_u8 lbl = read_idx_u8(lbl_path, 1);
  if (img.dims[0] != lbl.dims[0])
    throw error("mnist: image count " + std::to_string(img.dims[0]) + " in " + img_path +
                " does not match label count " + std::to_string(lbl.dims[0]) + " in " + lbl_path);

  mnist_split s;
  s.count = img.dims[0];
  s.rows = img.dims[1];
  s.cols = img.dims[2];
  s.labels.resize(lbl.data.size());
  for (std::size_t i = 0; i < lbl.data.size(); ++i) {
    if (lbl.data[i] >= 10)
      detail::idx_fail(lbl_path, "label " + std::to_string(lbl.data[i]) + " at index " +
                                     std::to_string(i) + " (byte offset " + std::to_string(8 + i) +
                                     ") is out of range 0..9");
    s.labels[i] = lbl.data[i];
  }
  s.images.resize(img.data.size());
  preprocess_pixels(img.data.data(), s.images.data(), img.data.size());
  return s;
}
#else
    ;
#endif

} // namespace typeflow::data
