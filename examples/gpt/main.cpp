// examples/gpt: the character-level transformer of model.hpp trained on a text corpus (by
// default Debian's fortunes, /usr/share/games/fortunes), logging as the main job does:
//   step N, loss = X.XX (N.N examples/sec; N.NNN sec/batch)
// then the validation loss and a sample of generated text.
//   gpt [--steps 2000] [--batch-size 32] [--learning-rate 3e-3] [--data DIR_OR_FILE]
//       [--seed 1] [--log-every 100] [--threads N] [--sample 300] [--temperature 0.8]
//       [--replay DIR]
// With --replay DIR it also writes what examples/gpt/replay_torch.py needs to replay the
// training in PyTorch (examples/text_main.hpp, the program it shares with examples/lstm).
#include "../text_main.hpp"
#include "model.hpp"

namespace {
struct gpt_example {
  static constexpr const char* program = "gpt";
  static constexpr const char* description =
      "typeflow's character-level transformer (examples/gpt)";
  static constexpr std::int64_t vocab = gpt::vocab, context = gpt::context;
  static constexpr auto tokens = gpt::tokens;
  static constexpr auto targets = gpt::targets;
  static constexpr auto logits = gpt::logits;
  static constexpr auto loss = gpt::loss;
  static constexpr auto train_op = gpt::train_op;
  static constexpr auto learning_rate = gpt::learning_rate;
};
} // namespace

int main(int argc, char** argv) {
  return examples::text::main<gpt_example>(argc, argv, examples::text::options{});
}
