// examples/resnet's parts that are not templates: its flags, the training set's limit and
// flips, and the --replay files. Compiled once, in io.cpp with CLI11, not in the model's
// translation unit (main.cpp).
#pragma once
#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <string>

#include "typeflow/io/batch.hpp"
#include "typeflow/io/idx.hpp"

namespace resnet {

/// The flags, with their defaults (`resnet --help` lists them).
struct options {
  std::int64_t epochs = 15;
  std::int64_t batch_size = 128;
  double learning_rate = 2e-3;
  std::string schedule = "cosine";
  bool no_flip = false;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t train_limit = 0;
  std::int64_t test_limit = 0;
  std::uint64_t seed = 1;
  std::int64_t log_every = 100;
  int threads = 0;
  std::string checkpoint;
  std::string restore;
  std::string replay;
};

/// Parses the command line into o (its values are the defaults). Returns the exit code when the
/// program should stop instead of training: 0 after --help, 2 after a bad flag.
std::optional<int> parse_flags(int argc, char** argv, options& o);

/// The files of --replay DIR: the batches and losses, appended step by step.
class replay_files {
public:
  /// Creates DIR (and its parents) and the three files in it; throws typeflow::error if it
  /// cannot.
  explicit replay_files(const std::string& dir);
  void step(const typeflow::data::batch& b, float loss, float rate);

private:
  std::ofstream images_, labels_, losses_;
};

/// The first `limit` examples of a split (all of them when limit is 0 or more than it has).
void truncate(typeflow::data::mnist_split& s, std::int64_t limit);

/// Mirrors each image of `b` left to right with probability 1/2, drawn from rng.
void flip_half(typeflow::data::batch& b, std::mt19937_64& rng);

} // namespace resnet
