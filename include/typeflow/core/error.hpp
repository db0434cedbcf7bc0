// Errors: run-time misuse throws typeflow::error; compile-time misuse is a static_assert whose
// full message (op and shapes) is the template argument of typeflow::compile_error.
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
