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
// `learning_rate`. The flags, the corpus and the batches are text/io.hpp's, compiled once
// (text/io.cpp) instead of in each model's translation unit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "step_log.hpp"
#include "text/io.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/typeflow.hpp"

namespace examples {

namespace text {

namespace ty = typeflow;

/// The program: flags (defaults from `o`), training, validation, generation.
template <class M>
int main(int argc, char** argv, options o) {
  constexpr std::int64_t vocab = M::vocab, context = M::context;
  if (const auto stop = parse_flags(argc, argv, M::description, o))
    return *stop;

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
      replay = std::make_unique<replay_files>(o.replay); // creates the directory
      ty::save_checkpoint(s, std::filesystem::path(o.replay) / "initial.safetensors");
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
