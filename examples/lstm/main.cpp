// examples/lstm: the character-level LSTM of model.hpp trained on a text corpus (by default
// Debian's fortunes, /usr/share/games/fortunes), logging as the main job does:
//   step N, loss = X.XX (N.N examples/sec; N.NNN sec/batch)
// then the validation loss and a sample of generated text.
//   lstm [--steps 2000] [--batch-size 32] [--learning-rate 3e-3] [--data DIR_OR_FILE]
//        [--seed 1] [--log-every 100] [--threads N] [--sample 300] [--temperature 0.8]
//        [--replay DIR]
// With --replay DIR it also writes what examples/lstm/replay_torch.py needs to replay the
// training in PyTorch (examples/text_main.hpp, the program it shares with examples/gpt).
#include "../text_main.hpp"
#include "model.hpp"

namespace {
struct lstm_example {
  static constexpr const char* program = "lstm";
  static constexpr const char* description = "typeflow's character-level LSTM (examples/lstm)";
  static constexpr std::int64_t vocab = lstm::vocab, context = lstm::context;
  static constexpr auto tokens = lstm::tokens;
  static constexpr auto targets = lstm::targets;
  static constexpr auto logits = lstm::logits;
  static constexpr auto loss = lstm::loss;
  static constexpr auto train_op = lstm::train_op;
  static constexpr auto learning_rate = lstm::learning_rate;
};
} // namespace

int main(int argc, char** argv) {
  return examples::text::main<lstm_example>(argc, argv, examples::text::options{});
}
