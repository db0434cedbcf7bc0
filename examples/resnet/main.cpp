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
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "../step_log.hpp"
#include "io.hpp"
#include "model.hpp"
#include "typeflow/io/batch.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/io/idx.hpp"

namespace {

namespace ty = resnet::ty;

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
  resnet::options o;
  if (const auto stop = resnet::parse_flags(argc, argv, o))
    return *stop;

  try {
    auto train = ty::data::load_mnist(o.data_dir, true);
    auto test = ty::data::load_mnist(o.data_dir, false);
    resnet::truncate(train, o.train_limit);
    resnet::truncate(test, o.test_limit);
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
    std::unique_ptr<resnet::replay_files> replay;
    if (!o.replay.empty()) {
      replay = std::make_unique<resnet::replay_files>(o.replay); // creates the directory
      ty::save_checkpoint(s, std::filesystem::path(o.replay) / "initial.safetensors");
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
        resnet::flip_half(b, flips);
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
