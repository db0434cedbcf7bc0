// What the examples' flag parsers share (mnist/flags.cpp, text/io.cpp, resnet/io.cpp): CLI11
// set up the same way, so that every example's bad flag reads alike and exits with 2. Included
// only by those units, never by a model's: CLI11 is header-only and costs a model's unit seconds
// of compile time (bench/README.md).
#pragma once
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace examples::cli {

/// A CLI11 check that the value is a number, and positive (or non-negative): "--epochs: must be
/// positive, got 0". The integer flags' conversion then rejects fractions. (CLI11 2.1's own
/// PositiveNumber would say "Value 0 not in range 2.225074e-308 to 1.797693e+308".)
inline CLI::Validator number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        if (errno != 0 || end == text.c_str() || *end != '\0')
          return "expects a number, got \"" + text + "\"";
        if (allow_zero ? !(v >= 0) : !(v > 0))
          return std::string(allow_zero ? "must be non-negative" : "must be positive") + ", got " +
                 text;
        return {};
      },
      allow_zero ? "NONNEGATIVE" : "POSITIVE");
}

/// The program's name for its messages: argv[0]'s file name, else `fallback`.
inline std::string program_name(int argc, char** argv, const char* fallback) {
  return argc > 0 ? std::filesystem::path(argv[0]).filename().string() : std::string(fallback);
}

/// --help shows the defaults; an error message starts with the program's name.
inline void configure(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    return a->get_name() + ": " + CLI::FailureMessage::simple(a, e);
  });
}

/// Parses the command line, then runs `checks` (which throw CLI::ValidationError for what CLI11
/// cannot state, such as flags that need each other). Returns the exit code when the program
/// should stop instead of running: 0 after --help (usage on stdout), 2 after a bad flag (the
/// reason on stderr).
template <class Checks>
std::optional<int> parse(CLI::App& app, int argc, char** argv, Checks&& checks) {
  try {
    app.parse(argc, argv);
    checks();
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  return parse(app, argc, argv, [] {});
}

} // namespace examples::cli
