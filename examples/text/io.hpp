// The character-level examples' (gpt, lstm) parts that are not templates: their flags, the
// corpus, the batches and the --replay files. Compiled once, in io.cpp with CLI11, not in each
// model's translation unit (examples/text_main.hpp, the program around the model).
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include "typeflow/core/tensor.hpp"

namespace examples::text {

/// The flags, with their defaults (`gpt --help` lists them).
struct options {
  std::int64_t steps = 2000;
  std::int64_t batch_size = 32;
  double learning_rate = 3e-3;
  std::string data = "/usr/share/games/fortunes";
  std::uint64_t seed = 1;
  std::int64_t log_every = 100;
  int threads = 0;
  std::int64_t sample = 300;
  double temperature = 0.8;
  std::string replay;
};

/// Parses the command line into o (its values are the defaults). Returns the exit code when the
/// program should stop instead of training: 0 after --help, 2 after a bad flag.
std::optional<int> parse_flags(int argc, char** argv, const char* description, options& o);

/// The files of --replay DIR: the batches and losses, appended step by step.
class replay_files {
public:
  /// Creates DIR (and its parents) and the two files in it; throws typeflow::error if it cannot.
  explicit replay_files(const std::string& dir);
  void step(const typeflow::tensor<std::int32_t>& x, const typeflow::tensor<std::int32_t>& y,
            float loss);

private:
  std::ofstream batches_, losses_;
};

/// The corpus as bytes 0..vocab-1 (others become '?'): a file, or every regular file of a
/// directory (sorted by name; fortune's .dat indexes and .u8 links skipped).
std::string read_corpus(const std::string& where, std::int64_t vocab, std::int64_t context);

/// batch windows of context + 1 bytes of `text` from random offsets: tokens and targets.
void draw(const std::string& text, std::int64_t batch, std::int64_t context, std::mt19937_64& rng,
          typeflow::tensor<std::int32_t>& x, typeflow::tensor<std::int32_t>& y);

} // namespace examples::text
