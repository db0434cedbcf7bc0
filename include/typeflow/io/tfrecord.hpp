// TFRecord files as TensorFlow writes them (tf.io.TFRecordWriter / tf.data.TFRecordDataset):
// each record is
//   uint64 length (little-endian) | uint32 masked_crc32c(length) | data[length] | uint32
//   masked_crc32c(data)
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, optionally the whole stream compressed as
// GZIP or ZLIB (TFRecordOptions). CRC-32C (Castagnoli) uses the SSE4.2 crc32 instruction where
// the CPU has it, a slicing-by-8 table elsewhere.
//
// The reader never reads past the end and never allocates what a corrupt length claims: an
// uncompressed record's length is checked against the bytes left in the file, a compressed
// record's buffer grows only as its data arrives. Every problem throws typeflow::error naming the
// file, the record number and the byte offset.
#pragma once

#include "../core/compiled.hpp"
#include "../core/error.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#endif

#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
#include <zlib.h>
#endif

namespace typeflow::io {

// ---- CRC-32C ---------------------------------------------------------------------------------

namespace detail {

/// Slicing-by-8 tables of the reflected Castagnoli polynomial 0x82F63B78.
struct crc32c_tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  constexpr crc32c_tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
      t[0][i] = c;
    }
    for (std::size_t s = 1; s < 8; ++s)
      for (std::size_t i = 0; i < 256; ++i)
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  }
};
inline constexpr crc32c_tables crc32c_table{};

/// CRC-32C state update (no pre/post inversion) by table, 8 bytes at a time.
inline std::uint32_t crc32c_update_table(std::uint32_t c, const unsigned char* p, std::size_t n) {
  const auto& t = crc32c_table.t;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    if constexpr (std::endian::native == std::endian::big)
      w = __builtin_bswap64(w);
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^
        t[0][(w >> 56) & 0xFF];
    p += 8;
    n -= 8;
  }
  while (n--)
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return c;
}

#if defined(__x86_64__)
/// CRC-32C state update with the SSE4.2 crc32 instruction (three independent streams would be
/// faster still; one stream runs at about 8 bytes per 3 cycles, far above the disk).
__attribute__((target("sse4.2"))) inline std::uint32_t
crc32c_update_sse42(std::uint32_t c, const unsigned char* p, std::size_t n) {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c64);
  while (n--)
    c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
inline bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

} // namespace detail

/// CRC-32C of `n` bytes, continuing from `crc` (0 to start), as TensorFlow's crc32c::Extend.
inline std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (detail::cpu_has_sse42())
    return ~detail::crc32c_update_sse42(~crc, p, n);
#endif
  return ~detail::crc32c_update_table(~crc, p, n);
}
/// The table implementation alone (tests compare it with the instruction).
inline std::uint32_t crc32c_portable(const void* data, std::size_t n, std::uint32_t crc = 0) {
  return ~detail::crc32c_update_table(~crc, static_cast<const unsigned char*>(data), n);
}
/// Whether crc32c uses the SSE4.2 instruction on this CPU.
inline bool crc32c_hardware() {
#if defined(__x86_64__)
  return detail::cpu_has_sse42();
#else
  return false;
#endif
}

/// TFRecord's masked CRC: a CRC of data that holds CRCs is itself unlikely to look like one.
constexpr std::uint32_t mask_crc(std::uint32_t c) {
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}
constexpr std::uint32_t unmask_crc(std::uint32_t m) {
  const std::uint32_t r = m - 0xa282ead8u;
  return (r >> 17) | (r << 15);
}

// ---- files -----------------------------------------------------------------------------------

/// TFRecordOptions' compression_type: "" (none), "GZIP" or "ZLIB".
enum class tfrecord_compression { none, gzip, zlib };

namespace detail {

[[noreturn]] inline void tfrecord_fail(const std::string& path, const std::string& what) {
  throw error("tfrecord " + path + ": " + what);
}

inline std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
inline std::uint32_t load_le32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}
inline void store_le64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void store_le32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * i));
}

/// A byte stream over a regular file, decompressed as asked: read() fills what it can and
/// returns less only at the end of the (decompressed) data; I/O and format errors throw.
class tfrecord_source {
public:
  tfrecord_source(std::string path, tfrecord_compression c) : path_(std::move(path)), c_(c) {
    // O_NONBLOCK: a FIFO with no writer must not hang the open; only regular files are read.
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0)
      tfrecord_fail(path_, "cannot open: " + std::generic_category().message(errno));
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fd_ = -1;
      tfrecord_fail(path_, "cannot open: not a regular file");
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    size_ = static_cast<std::uint64_t>(st.st_size);
    if (c_ != tfrecord_compression::none) {
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
      zs_ = std::make_unique<z_stream>();
      std::memset(zs_.get(), 0, sizeof(z_stream));
      const int bits = c_ == tfrecord_compression::gzip ? 16 + MAX_WBITS : MAX_WBITS;
      if (inflateInit2(zs_.get(), bits) != Z_OK) {
        zs_.reset();
        tfrecord_fail(path_, "cannot initialise zlib");
      }
      in_.resize(std::size_t{1} << 16);
#else
      tfrecord_fail(path_, "compressed TFRecord files need zlib (define TYPEFLOW_HAS_ZLIB=1)");
#endif
    }
  }
  ~tfrecord_source() {
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
    if (zs_)
      inflateEnd(zs_.get());
#endif
    if (fd_ >= 0)
      ::close(fd_);
  }
  tfrecord_source(const tfrecord_source&) = delete;
  tfrecord_source& operator=(const tfrecord_source&) = delete;

  bool compressed() const {
    return c_ != tfrecord_compression::none;
  }
  /// Bytes of (decompressed) data returned so far.
  std::uint64_t offset() const {
    return out_;
  }
  /// Uncompressed bytes not yet read (meaningless for compressed input).
  std::uint64_t remaining() const {
    return size_ - out_;
  }
  const std::string& path() const {
    return path_;
  }

  std::size_t read(void* dst, std::size_t n) {
    std::size_t got = compressed() ? inflate_into(static_cast<unsigned char*>(dst), n)
                                   : read_buffered(static_cast<unsigned char*>(dst), n);
    out_ += got;
    return got;
  }

private:
  /// Uncompressed input through a 256 KiB buffer: a record costs no system call of its own.
  std::size_t read_buffered(unsigned char* dst, std::size_t n) {
    constexpr std::size_t cap = std::size_t{1} << 18;
    std::size_t got = 0;
    while (got < n) {
      if (rpos_ == rbuf_.size()) {
        if (n - got >= cap) // a large read goes straight to its destination
          return got + read_raw(dst + got, n - got);
        rbuf_.resize(cap);
        rbuf_.resize(read_raw(rbuf_.data(), cap));
        rpos_ = 0;
        if (rbuf_.empty())
          break;
      }
      const std::size_t take = std::min(n - got, rbuf_.size() - rpos_);
      std::memcpy(dst + got, rbuf_.data() + rpos_, take);
      rpos_ += take;
      got += take;
    }
    return got;
  }
  std::size_t read_raw(unsigned char* dst, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(fd_, dst + got, n - got);
      if (r < 0) {
        if (errno == EINTR)
          continue;
        tfrecord_fail(path_, "cannot read at byte offset " + std::to_string(file_off_ + got) +
                                 ": " + std::generic_category().message(errno));
      }
      if (r == 0)
        break;
      got += static_cast<std::size_t>(r);
    }
    file_off_ += got;
    return got;
  }
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  std::size_t inflate_into(unsigned char* dst, std::size_t n) {
    std::size_t got = 0;
    while (got < n && !ended_) {
      if (zs_->avail_in == 0) {
        const std::size_t r = read_raw(in_.data(), in_.size());
        if (r == 0)
          tfrecord_fail(path_, "truncated compressed stream: the file ends at byte offset " +
                                   std::to_string(file_off_) + " inside it (" +
                                   std::to_string(out_ + got) + " bytes decompressed)");
        zs_->next_in = in_.data();
        zs_->avail_in = static_cast<uInt>(r);
      }
      const std::size_t want = std::min<std::size_t>(n - got, std::size_t{1} << 30);
      zs_->next_out = dst + got;
      zs_->avail_out = static_cast<uInt>(want);
      const int rc = inflate(zs_.get(), Z_NO_FLUSH);
      got += want - zs_->avail_out;
      if (rc == Z_STREAM_END) {
        ended_ = true;
        // Another gzip member may follow (concatenated files); anything else is garbage.
        const bool more_in_buffer = zs_->avail_in > 0;
        unsigned char probe = 0;
        const bool more = more_in_buffer || read_raw(&probe, 1) == 1;
        if (more) {
          const unsigned char first = more_in_buffer ? *zs_->next_in : probe;
          if (c_ == tfrecord_compression::gzip && first == 0x1f) {
            inflateReset(zs_.get());
            if (!more_in_buffer) {
              in_[0] = probe;
              zs_->next_in = in_.data();
              zs_->avail_in = 1;
            }
            ended_ = false;
          } else {
            tfrecord_fail(path_,
                          "garbage after the compressed stream (byte offset " +
                              std::to_string(file_off_ - zs_->avail_in - (more_in_buffer ? 0 : 1)) +
                              ")");
          }
        }
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        tfrecord_fail(path_, std::string("corrupt compressed stream near decompressed byte "
                                         "offset ") +
                                 std::to_string(out_ + got) + ": " +
                                 (zs_->msg ? zs_->msg : "inflate failed"));
      }
    }
    return got;
  }
#else
  std::size_t inflate_into(unsigned char*, std::size_t) {
    return 0;
  }
#endif

  std::string path_;
  tfrecord_compression c_;
  int fd_ = -1;
  std::uint64_t size_ = 0, out_ = 0, file_off_ = 0;
  std::vector<unsigned char> rbuf_; ///< uncompressed input: rbuf_[rpos_, size) not yet returned
  std::size_t rpos_ = 0;
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  std::unique_ptr<z_stream> zs_;
  std::vector<unsigned char> in_;
  bool ended_ = false;
#endif
};

} // namespace detail

/// Reads the records of one TFRecord file in order.
///   tfrecord_reader r("train.tfrecord");
///   std::string rec;
///   while (r.next(rec)) ...
class tfrecord_reader {
public:
  explicit tfrecord_reader(std::string path, tfrecord_compression c = tfrecord_compression::none)
      : src_(std::move(path), c) {}

  /// The next record into `out` (its capacity is reused); false at the end of the file. A
  /// record cut short, a corrupt length or a CRC mismatch throws typeflow::error.
  bool next(std::string& out);
  /// Records read so far.
  std::uint64_t records() const { return records_; }
  const std::string& path() const { return src_.path(); }

private:
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const {
    detail::tfrecord_fail(src_.path(), "record " + std::to_string(records_) + " at byte offset " +
                                           std::to_string(at) +
                                           (src_.compressed() ? " of the decompressed data" : "") +
                                           ": " + what);
  }
  detail::tfrecord_source src_;
  std::uint64_t records_ = 0;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL bool tfrecord_reader::next(std::string& out) {
  unsigned char head[12];
  const std::uint64_t at = src_.offset();
  const std::size_t got = src_.read(head, sizeof head);
  if (got == 0)
    return false;
  if (got < sizeof head)
    fail(at, "truncated record header: " + std::to_string(got) + " of 12 bytes");
  const std::uint64_t len = detail::load_le64(head);
  if (mask_crc(crc32c(head, 8)) != detail::load_le32(head + 8))
    fail(at, "corrupt length (CRC mismatch of the length field)");
  if (!src_.compressed() && (len > src_.remaining() || src_.remaining() - len < 4))
    fail(at, "truncated record: length " + std::to_string(len) + " needs " + std::to_string(len) +
                 " + 4 bytes, but " + std::to_string(src_.remaining()) + " follow the header");
  // Grow as the data arrives: a corrupt length in a compressed stream allocates no more than
  // the stream really holds.
  out.clear();
  constexpr std::uint64_t step = std::uint64_t{1} << 24;
  while (out.size() < len) {
    const std::size_t have = out.size();
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(len - have, step));
    out.resize(have + want);
    const std::size_t r = src_.read(out.data() + have, want);
    if (r < want)
      fail(at, "truncated record: " + std::to_string(have + r) + " of " + std::to_string(len) +
                   " data bytes");
  }
  unsigned char tail[4];
  if (src_.read(tail, 4) < 4)
    fail(at, "truncated record: the data CRC is missing");
  if (mask_crc(crc32c(out.data(), out.size())) != detail::load_le32(tail))
    fail(at, "corrupt data (CRC mismatch of " + std::to_string(len) + " bytes)");
  ++records_;
  return true;
}
#endif

/// Writes records as tf.io.TFRecordWriter does. close() (or the destructor) finishes the
/// compressed stream and flushes; close() reports errors, the destructor cannot.
class tfrecord_writer {
public:
  explicit tfrecord_writer(std::string path, tfrecord_compression c = tfrecord_compression::none,
                           int level = 6)
      : path_(std::move(path)), c_(c) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      detail::tfrecord_fail(path_, "cannot create: " + std::generic_category().message(errno));
    if (c_ != tfrecord_compression::none) {
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
      zs_ = std::make_unique<z_stream>();
      std::memset(zs_.get(), 0, sizeof(z_stream));
      const int bits = c_ == tfrecord_compression::gzip ? 16 + MAX_WBITS : MAX_WBITS;
      if (deflateInit2(zs_.get(), level, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        zs_.reset();
        ::close(fd_);
        detail::tfrecord_fail(path_, "cannot initialise zlib");
      }
#else
      (void)level;
      ::close(fd_);
      detail::tfrecord_fail(path_, "compressed TFRecord files need zlib (TYPEFLOW_HAS_ZLIB=1)");
#endif
    }
    buf_.reserve(std::size_t{1} << 16);
  }
  ~tfrecord_writer() {
    try {
      close();
    } catch (...) {
    }
  }
  tfrecord_writer(const tfrecord_writer&) = delete;
  tfrecord_writer& operator=(const tfrecord_writer&) = delete;

  void write(std::string_view record) {
    if (fd_ < 0)
      detail::tfrecord_fail(path_, "write after close");
    unsigned char head[12], tail[4];
    detail::store_le64(head, record.size());
    detail::store_le32(head + 8, mask_crc(crc32c(head, 8)));
    detail::store_le32(tail, mask_crc(crc32c(record.data(), record.size())));
    put(head, sizeof head);
    put(record.data(), record.size());
    put(tail, sizeof tail);
  }

  /// Finishes the stream, flushes and closes (fsync'd when `durable`).
  void close(bool durable = false) {
    if (fd_ < 0)
      return;
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
    if (zs_) {
      deflate_buf(Z_FINISH);
      deflateEnd(zs_.get());
      zs_.reset();
    }
#endif
    flush_raw();
    const int fd = std::exchange(fd_, -1);
    if (durable && ::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      detail::tfrecord_fail(path_, "cannot fsync: " + std::generic_category().message(e));
    }
    if (::close(fd) != 0)
      detail::tfrecord_fail(path_, "cannot close: " + std::generic_category().message(errno));
  }

private:
  void put(const void* p, std::size_t n) {
    const auto* b = static_cast<const char*>(p);
    buf_.insert(buf_.end(), b, b + n);
    if (buf_.size() >= (std::size_t{1} << 16)) {
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
      if (zs_) {
        deflate_buf(Z_NO_FLUSH);
        return;
      }
#endif
      flush_raw();
    }
  }
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  /// Compresses buf_ into out_, writing out_ as it fills.
  void deflate_buf(int flush) {
    zs_->next_in = reinterpret_cast<Bytef*>(buf_.data());
    zs_->avail_in = static_cast<uInt>(buf_.size());
    unsigned char chunk[1 << 15];
    int rc = Z_OK;
    do {
      zs_->next_out = chunk;
      zs_->avail_out = sizeof chunk;
      rc = deflate(zs_.get(), flush);
      if (rc == Z_STREAM_ERROR)
        detail::tfrecord_fail(path_, "zlib deflate failed");
      write_all(chunk, sizeof chunk - zs_->avail_out);
    } while (zs_->avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    buf_.clear();
  }
#endif
  void flush_raw() {
    write_all(buf_.data(), buf_.size());
    buf_.clear();
  }
  void write_all(const void* p, std::size_t n) {
    const auto* b = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t r = ::write(fd_, b, n);
      if (r < 0) {
        if (errno == EINTR)
          continue;
        detail::tfrecord_fail(path_, "cannot write: " + std::generic_category().message(errno));
      }
      b += r;
      n -= static_cast<std::size_t>(r);
    }
  }

  std::string path_;
  tfrecord_compression c_;
  int fd_ = -1;
  std::vector<char> buf_;
#if defined(TYPEFLOW_HAS_ZLIB) && TYPEFLOW_HAS_ZLIB
  std::unique_ptr<z_stream> zs_;
#endif
};

} // namespace typeflow::io
