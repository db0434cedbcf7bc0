// examples/resnet's flags, replay files and training-set helpers (see io.hpp).
#include "io.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>

#include "../cli.hpp"
#include "../replay_dir.hpp"
#include "typeflow/core/error.hpp"

namespace resnet {

namespace fs = std::filesystem;
namespace ty = typeflow;

std::optional<int> parse_flags(int argc, char** argv, options& o) {
  CLI::App app("typeflow's residual network with batch norm on Fashion-MNIST (examples/resnet)",
               examples::cli::program_name(argc, argv, "resnet"));
  examples::cli::configure(app);
  const auto positive = examples::cli::number_check(false);
  const auto non_negative = examples::cli::number_check(true);
  app.add_option("--epochs", o.epochs, "passes over the training set")->check(non_negative);
  app.add_option("--batch-size", o.batch_size, "images per step")->check(CLI::Range(2, 1 << 20));
  app.add_option("--learning-rate", o.learning_rate, "Adam's learning rate")->check(positive);
  app.add_option("--schedule", o.schedule, "the learning rate over the run: cosine or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_flag("--no-flip", o.no_flip, "do not mirror training images at random");
  app.add_option("--data-dir", o.data_dir, "the Fashion-MNIST IDX files");
  app.add_option("--train-limit", o.train_limit, "train on the first N images (0: all)")
      ->check(non_negative);
  app.add_option("--test-limit", o.test_limit, "test on the first N images (0: all)")
      ->check(non_negative);
  app.add_option("--seed", o.seed, "the session's and the batches' seed");
  app.add_option("--log-every", o.log_every, "steps between log lines")->check(positive);
  app.add_option("--threads", o.threads, "CPU threads (0: all)")->check(non_negative);
  app.add_option("--checkpoint", o.checkpoint, "save the variables here at the end");
  app.add_option("--restore", o.restore, "restore the variables from here before training");
  app.add_option("--replay", o.replay,
                 "a directory to write the initial variables, batches and losses into "
                 "(for replay_torch.py)");
  return examples::cli::parse(app, argc, argv);
}

replay_files::replay_files(const std::string& dir) {
  examples::create_replay_directory(dir);
  images_.open(fs::path(dir) / "images.bin", std::ios::binary);
  labels_.open(fs::path(dir) / "labels.bin", std::ios::binary);
  losses_.open(fs::path(dir) / "losses.txt");
  if (!images_ || !labels_ || !losses_)
    throw ty::error("cannot write the replay files in " + dir);
}

void replay_files::step(const ty::data::batch& b, float loss, float rate) {
  static_assert(std::endian::native == std::endian::little);
  images_.write(reinterpret_cast<const char*>(b.images.data()),
                static_cast<std::streamsize>(b.images.size() * sizeof(float)));
  labels_.write(reinterpret_cast<const char*>(b.labels.data()),
                static_cast<std::streamsize>(b.labels.size() * sizeof(std::int32_t)));
  char line[48];
  std::snprintf(line, sizeof line, "%.9g %.9g\n", static_cast<double>(loss),
                static_cast<double>(rate));
  losses_ << line;
  if (!images_ || !labels_ || !losses_)
    throw ty::error("writing the replay files failed");
}

void truncate(ty::data::mnist_split& s, std::int64_t limit) {
  if (limit <= 0 || limit >= s.count)
    return;
  s.count = limit;
  s.images.resize(static_cast<std::size_t>(limit * s.rows * s.cols));
  s.labels.resize(static_cast<std::size_t>(limit));
}

void flip_half(ty::data::batch& b, std::mt19937_64& rng) {
  for (std::int64_t i = 0; i < b.size; ++i) {
    if ((rng() & 1) == 0)
      continue;
    float* image = b.images.data() + i * 28 * 28;
    for (std::int64_t r = 0; r < 28; ++r)
      std::reverse(image + r * 28, image + (r + 1) * 28);
  }
}

} // namespace resnet
