// Errors: run-time misuse throws typeflow::error; compile-time misuse is rejected by
// detail::reject (core/fixed_string.hpp), whose first error line carries the message.
#pragma once
#include <stdexcept>
#include <string>

namespace typeflow {

/// Base of every exception the library throws for run-time misuse (bad feed, bad shape, ...).
class error : public std::runtime_error {
public:
  explicit error(const std::string& what) : std::runtime_error("typeflow: " + what) {}
};

} // namespace typeflow
