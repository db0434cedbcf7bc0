// What the character-level examples (gpt, lstm) share: the program around a model of next-byte
// prediction. It trains the model on a text corpus (by default Debian's fortunes,
// /usr/share/games/fortunes), logging as the main job does:
//   step N, loss = X.XXXX (N.N examples/sec; N.NNN sec/batch)
// then prints the validation loss and a sample of generated text.
//   PROGRAM [--steps N] [--batch-size N] [--learning-rate X] [--data DIR_OR_FILE] [--seed 1]
//           [--log-every 100] [--threads N] [--sample 300] [--temperature 0.8] [--replay DIR]
// With --replay DIR it also writes what the example's replay_torch.py needs to replay the
// training in PyTorch: DIR/initial.safetensors (the variables before step 1), DIR/batches.bin
// (each step's tokens and targets, int32 little-endian [steps, 2, batch, context]) and
// DIR/losses.txt (each step's loss, 9 significant digits).
//
// A model is a class with static members: `program` and `description` (strings), `vocab` and
// `context` (bytes 0..vocab-1; tokens per sequence), the placeholders `tokens` and `targets`
// (int32 [B, context]), `logits` ([B, context, vocab]), `loss`, `train_op` and the hyperparameter
// `learning_rate`.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "step_log.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/typeflow.hpp"

namespace examples {

namespace text {

namespace fs = std::filesystem;
namespace ty = typeflow;

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

/// The files of --replay DIR: the batches and losses, appended step by step.
struct replay_files {
  std::ofstream batches, losses;
  explicit replay_files(const fs::path& dir)
      : batches(dir / "batches.bin", std::ios::binary), losses(dir / "losses.txt") {
    if (!batches || !losses)
      throw ty::error("cannot write the replay files in " + dir.string());
  }
  void step(const ty::tensor<std::int32_t>& x, const ty::tensor<std::int32_t>& y, float loss) {
    static_assert(std::endian::native == std::endian::little);
    for (const auto* t : {&x, &y})
      batches.write(reinterpret_cast<const char*>(t->data()),
                    static_cast<std::streamsize>(t->size()) *
                        static_cast<std::streamsize>(sizeof(std::int32_t)));
    char line[32];
    std::snprintf(line, sizeof line, "%.9g\n", static_cast<double>(loss));
    losses << line;
    if (!batches || !losses)
      throw ty::error("writing the replay files failed");
  }
};

/// The corpus as bytes 0..vocab-1 (others become '?'): a file, or every regular file of a
/// directory (sorted by name; fortune's .dat indexes and .u8 links skipped).
inline std::string read_corpus(const std::string& where, std::int64_t vocab, std::int64_t context) {
  std::vector<fs::path> files;
  if (fs::is_directory(where)) {
    for (const auto& e : fs::directory_iterator(where))
      if (e.is_regular_file() && e.path().extension() != ".dat" && e.path().extension() != ".u8")
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.emplace_back(where);
  }
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in)
      throw ty::error("cannot read " + f.string());
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (char& c : text)
    if (static_cast<unsigned char>(c) >= vocab)
      c = '?';
  if (static_cast<std::int64_t>(text.size()) < 4 * (context + 1))
    throw ty::error("the corpus at " + where + " has " + std::to_string(text.size()) +
                    " bytes; it needs at least " + std::to_string(4 * (context + 1)));
  return text;
}

/// batch windows of context + 1 bytes of `text` from random offsets: tokens and targets.
inline void draw(const std::string& text, std::int64_t batch, std::int64_t context,
                 std::mt19937_64& rng, ty::tensor<std::int32_t>& x, ty::tensor<std::int32_t>& y) {
  std::uniform_int_distribution<std::int64_t> at(0, static_cast<std::int64_t>(text.size()) -
                                                        context - 1);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t o = at(rng);
    for (std::int64_t t = 0; t < context; ++t) {
      x[b * context + t] = static_cast<unsigned char>(text[static_cast<std::size_t>(o + t)]);
      y[b * context + t] = static_cast<unsigned char>(text[static_cast<std::size_t>(o + t + 1)]);
    }
  }
}

/// The program: flags (defaults from `o`), training, validation, generation.
template <class M>
int main(int argc, char** argv, options o) {
  constexpr std::int64_t vocab = M::vocab, context = M::context;
  CLI::App app{M::description};
  app.add_option("--steps", o.steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", o.batch_size, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--learning-rate", o.learning_rate, "Adam's learning rate")
      ->check(CLI::PositiveNumber);
  app.add_option("--data", o.data, "a text file or a directory of them");
  app.add_option("--seed", o.seed, "the session's and the batches' seed");
  app.add_option("--log-every", o.log_every, "steps between log lines")->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "CPU threads (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--sample", o.sample, "bytes of text to generate at the end")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->check(CLI::PositiveNumber);
  app.add_option("--replay", o.replay,
                 "a directory to write the initial variables, batches and losses into "
                 "(for replay_torch.py)");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::string text = read_corpus(o.data, vocab, context);
    const std::size_t split = text.size() * 9 / 10; // the last tenth validates
    const std::string train = text.substr(0, split), valid = text.substr(split);
    std::printf("corpus: %zu bytes (%zu train, %zu validation) from %s\n", text.size(),
                train.size(), valid.size(), o.data.c_str());

    ty::session<> s(ty::session_options{.threads = o.threads, .seed = o.seed});
    s.initialize(M::train_op);
    ty::tensor<float> lr(std::vector<std::int64_t>{});
    lr[0] = static_cast<float>(o.learning_rate);
    s.write(M::learning_rate, lr);
    std::unique_ptr<replay_files> replay;
    if (!o.replay.empty()) {
      fs::create_directories(o.replay);
      ty::save_checkpoint(s, fs::path(o.replay) / "initial.safetensors");
      replay = std::make_unique<replay_files>(o.replay);
    }

    std::mt19937_64 rng(o.seed);
    ty::tensor<std::int32_t> x({o.batch_size, context}), y({o.batch_size, context});
    step_log logger(o.batch_size, o.log_every, o.steps);
    for (std::int64_t step = 1; step <= o.steps; ++step) {
      draw(train, o.batch_size, context, rng, x, y);
      auto [l] =
          s.run(ty::fetch(M::loss, M::train_op), ty::feed(M::tokens, x), ty::feed(M::targets, y));
      if (replay)
        replay->step(x, y, l[0]);
      logger.after(step, l[0]);
    }

    // validation: the mean loss over 20 batches of the held-out tenth
    std::mt19937_64 vrng(o.seed + 1);
    double vloss = 0;
    for (int i = 0; i < 20; ++i) {
      draw(valid, o.batch_size, context, vrng, x, y);
      auto [l] = s.run(ty::fetch(M::loss), ty::feed(M::tokens, x), ty::feed(M::targets, y));
      vloss += static_cast<double>(l[0]) / 20;
    }
    std::printf("validation loss = %.4f\n", vloss);

    // generation: the last context bytes (spaces before the start) -> the next byte, sampled
    // from softmax(logits / temperature) at the last position
    std::string out = "\n";
    ty::tensor<std::int32_t> ctx({1, context});
    for (std::int64_t i = 0; i < o.sample; ++i) {
      for (std::int64_t t = 0; t < context; ++t) {
        const std::int64_t from = static_cast<std::int64_t>(out.size()) - context + t;
        ctx[t] = from >= 0 ? static_cast<unsigned char>(out[static_cast<std::size_t>(from)]) : ' ';
      }
      auto [lg] = s.run(ty::fetch(M::logits), ty::feed(M::tokens, ctx));
      const float* row = lg.data() + (context - 1) * vocab;
      std::vector<double> p(vocab);
      const float top = *std::max_element(row, row + vocab);
      for (std::int64_t c = 0; c < vocab; ++c)
        p[static_cast<std::size_t>(c)] = std::exp((row[c] - top) / o.temperature);
      std::discrete_distribution<int> pick(p.begin(), p.end());
      out.push_back(static_cast<char>(pick(rng)));
    }
    std::printf("sample:%s\n", out.c_str());
  } catch (const ty::error& e) {
    std::fprintf(stderr, "%s: %s\n", M::program, e.what());
    return 1;
  }
  return 0;
}

} // namespace text

} // namespace examples
