// examples/resnet: the residual network of model.hpp (batch norm after every convolution)
// trained on Fashion-MNIST, logging as the main job does:
//   step N, loss = X.XX (N.N examples/sec; N.NNN sec/batch)
// then the test accuracy, computed with the moving averages of batch norm (inference mode).
//   resnet [--epochs 15] [--batch-size 128] [--learning-rate 2e-3] [--schedule cosine]
//          [--no-flip] [--data-dir DIR] [--train-limit N] [--test-limit N] [--seed 1]
//          [--log-every 100] [--threads N] [--checkpoint FILE] [--restore FILE] [--replay DIR]
// The learning rate follows a cosine from --learning-rate to 0 over the run (--schedule
// constant: fixed), written into the graph's hyper-parameter before each step (no
// recompilation); each training image is mirrored left to right with probability 1/2 (a
// garment's mirror image is the same garment) unless --no-flip.
// --checkpoint saves every variable at the end (the moving averages included); --restore loads
// them before training, so `--restore FILE --epochs 0` tests a trained model. With --replay DIR
// it also writes what examples/resnet/replay_torch.py needs to replay the training in PyTorch:
// DIR/initial.safetensors (the variables before step 1), DIR/images.bin and DIR/labels.bin
// (each step's batch, float32 [steps, batch, 28, 28, 1] and int32 [steps, batch], little-endian)
// and DIR/losses.txt (each step's loss and learning rate, 9 significant digits).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../step_log.hpp"
#include "model.hpp"
#include "typeflow/io/batch.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/io/idx.hpp"

namespace {

namespace ty = resnet::ty;

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

/// The files of --replay DIR: the batches and losses, appended step by step.
struct replay_files {
  std::ofstream images, labels, losses;
  explicit replay_files(const std::filesystem::path& dir)
      : images(dir / "images.bin", std::ios::binary), labels(dir / "labels.bin", std::ios::binary),
        losses(dir / "losses.txt") {
    if (!images || !labels || !losses)
      throw ty::error("cannot write the replay files in " + dir.string());
  }
  void step(const ty::data::batch& b, float loss, float rate) {
    static_assert(std::endian::native == std::endian::little);
    images.write(reinterpret_cast<const char*>(b.images.data()),
                 static_cast<std::streamsize>(b.images.size() * sizeof(float)));
    labels.write(reinterpret_cast<const char*>(b.labels.data()),
                 static_cast<std::streamsize>(b.labels.size() * sizeof(std::int32_t)));
    char line[48];
    std::snprintf(line, sizeof line, "%.9g %.9g\n", static_cast<double>(loss),
                  static_cast<double>(rate));
    losses << line;
    if (!images || !labels || !losses)
      throw ty::error("writing the replay files failed");
  }
};

/// The first `limit` examples of a split (all of them when limit is 0 or more than it has).
void truncate(ty::data::mnist_split& s, std::int64_t limit) {
  if (limit <= 0 || limit >= s.count)
    return;
  s.count = limit;
  s.images.resize(static_cast<std::size_t>(limit * s.rows * s.cols));
  s.labels.resize(static_cast<std::size_t>(limit));
}

/// Mirrors each image of `b` left to right with probability 1/2, drawn from rng.
void flip_half(ty::data::batch& b, std::mt19937_64& rng) {
  for (std::int64_t i = 0; i < b.size; ++i) {
    if ((rng() & 1) == 0)
      continue;
    float* image = b.images.data() + i * 28 * 28;
    for (std::int64_t r = 0; r < 28; ++r)
      std::reverse(image + r * 28, image + (r + 1) * 28);
  }
}

/// The fraction of `test` that the inference-mode model classifies correctly.
template <class Session>
double test_accuracy(Session& s, const ty::data::mnist_split& test) {
  const std::int64_t chunk = 500, pixels = test.rows * test.cols;
  std::int64_t correct = 0;
  for (std::int64_t b = 0; b < test.count; b += chunk) {
    const std::int64_t n = std::min(chunk, test.count - b);
    auto [pred] =
        s.run(ty::fetch(resnet::predictions),
              ty::feed(resnet::images, ty::tensor_view<float>(test.images.data() + b * pixels,
                                                              {n, test.rows, test.cols, 1})));
    for (std::int64_t i = 0; i < n; ++i)
      correct += pred[i] == test.labels[static_cast<std::size_t>(b + i)];
  }
  return static_cast<double>(correct) / static_cast<double>(test.count);
}

} // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"typeflow's residual network with batch norm on Fashion-MNIST (examples/resnet)"};
  app.add_option("--epochs", o.epochs, "passes over the training set")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", o.batch_size, "images per step")->check(CLI::Range(2, 1 << 20));
  app.add_option("--learning-rate", o.learning_rate, "Adam's learning rate")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedule", o.schedule, "the learning rate over the run: cosine or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_flag("--no-flip", o.no_flip, "do not mirror training images at random");
  app.add_option("--data-dir", o.data_dir, "the Fashion-MNIST IDX files");
  app.add_option("--train-limit", o.train_limit, "train on the first N images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", o.test_limit, "test on the first N images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "the session's and the batches' seed");
  app.add_option("--log-every", o.log_every, "steps between log lines")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "CPU threads (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint", o.checkpoint, "save the variables here at the end");
  app.add_option("--restore", o.restore, "restore the variables from here before training");
  app.add_option("--replay", o.replay,
                 "a directory to write the initial variables, batches and losses into "
                 "(for replay_torch.py)");
  CLI11_PARSE(app, argc, argv);

  try {
    auto train = ty::data::load_mnist(o.data_dir, true);
    auto test = ty::data::load_mnist(o.data_dir, false);
    truncate(train, o.train_limit);
    truncate(test, o.test_limit);
    std::printf("Fashion-MNIST: %lld training and %lld test images from %s\n",
                static_cast<long long>(train.count), static_cast<long long>(test.count),
                o.data_dir.c_str());

    ty::session<> s(ty::session_options{.threads = o.threads, .seed = o.seed});
    s.initialize(resnet::train_op);
    if (!o.restore.empty()) {
      ty::restore_checkpoint(s, o.restore);
      std::printf("restored %s\n", o.restore.c_str());
    }
    s.write(resnet::learning_rate, static_cast<float>(o.learning_rate));
    std::unique_ptr<replay_files> replay;
    if (!o.replay.empty()) {
      std::filesystem::create_directories(o.replay);
      ty::save_checkpoint(s, std::filesystem::path(o.replay) / "initial.safetensors");
      replay = std::make_unique<replay_files>(o.replay);
    }

    // each epoch's last, partial batch dropped: a batch of one image has no variance
    ty::data::batcher batches(
        std::move(train.images), std::move(train.labels), 28 * 28,
        ty::data::batcher_options{
            .batch_size = o.batch_size, .shuffle = true, .seed = o.seed, .drop_last = true});
    const std::int64_t steps = o.epochs * batches.batches_per_epoch();
    std::mt19937_64 flips(o.seed + 1);
    examples::step_log logger(o.batch_size, o.log_every, steps);
    for (std::int64_t step = 1; step <= steps; ++step) {
      auto b = batches.next();
      if (!o.no_flip)
        flip_half(b, flips);
      const float rate =
          o.schedule == "cosine"
              ? static_cast<float>(0.5 * o.learning_rate *
                                   (1 + std::cos(std::numbers::pi * static_cast<double>(step - 1) /
                                                 static_cast<double>(steps))))
              : static_cast<float>(o.learning_rate);
      s.write(resnet::learning_rate, rate);
      auto [l] = s.run(
          ty::fetch(resnet::loss, resnet::train_op),
          ty::feed(resnet::images, ty::tensor_view<float>(b.images.data(), {b.size, 28, 28, 1})),
          ty::feed(resnet::labels, ty::tensor_view<std::int32_t>(b.labels.data(), {b.size})));
      if (replay)
        replay->step(b, l[0], rate);
      logger.after(step, l[0]);
    }
    std::printf("test accuracy = %.4f\n", test_accuracy(s, test));
    if (!o.checkpoint.empty()) {
      ty::save_checkpoint(s, o.checkpoint);
      std::printf("saved %s\n", o.checkpoint.c_str());
    }
  } catch (const ty::error& e) {
    std::fprintf(stderr, "resnet: %s\n", e.what());
    return 1;
  }
}
