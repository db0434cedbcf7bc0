// The examples' --replay DIR (text/io.cpp, resnet/io.cpp): created, with its parents, before
// their replay files are opened in it.
#pragma once
#include <filesystem>
#include <string>
#include <system_error>

#include "typeflow/core/error.hpp"

namespace examples {

/// Creates dir and its parents. A typeflow::error naming it and the reason where that fails (not
/// the std::filesystem::filesystem_error the throwing form would raise, which the examples'
/// handlers do not catch).
inline void create_replay_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw typeflow::error("cannot create the replay directory " + dir + ": " + ec.message());
}

} // namespace examples
