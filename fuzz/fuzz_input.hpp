// The fuzz targets' input as a file: the readers take paths, so each input is written to an
// anonymous in-memory file (memfd) and read back through /proc/self/fd/N, which the readers see
// as a regular file (no disk I/O, nothing left behind).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace typeflow::fuzz {

class memory_file {
public:
  memory_file(const std::uint8_t* data, std::size_t size)
      : fd_(::memfd_create("typeflow-fuzz", 0)) {
    if (fd_ < 0)
      std::abort();
    for (std::size_t at = 0; at < size;) {
      const ssize_t n = ::write(fd_, data + at, size - at);
      if (n <= 0)
        std::abort();
      at += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~memory_file() { ::close(fd_); }
  memory_file(const memory_file&) = delete;
  memory_file& operator=(const memory_file&) = delete;
  const std::string& path() const { return path_; }

private:
  int fd_;
  std::string path_;
};

} // namespace typeflow::fuzz
