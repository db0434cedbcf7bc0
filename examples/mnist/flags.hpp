// The main job's command line (examples/mnist/main.cpp): its flags, and the parser.
//
// The parser lives in its own translation unit (flags.cpp) with CLI11, so the model's
// translation unit does not compile CLI11 (header-only: about a fifth of main.cpp's time before
// the split; bench/README.md, *Figures moved from code comments*) and a change to the model does
// not recompile it. main.cpp, main_mpi.cpp and main.cu link the same object.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace mnist {

/// The flags, with their defaults (`mnist --help` lists them).
struct flags {
  int epochs = 10;
  std::int64_t batch_size = 128;
  double learning_rate = 0.03;
  double lr_decay = 0.9; // per epoch: lr_e = learning_rate * lr_decay^e
  int threads = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir;
  bool resume = false;
  std::uint64_t seed = 1;
  std::int64_t train_limit = 0; // use only the first N training examples (0: all)
  std::int64_t test_limit = 0;  // measure the accuracy on the first N test examples (0: all)
  int log_every = 100;
  std::string placement = "cpu";
  int replicas = 1;
  std::string precision = "float32";
  std::string data_format = "idx";
  int reader_threads = 2;
  std::string graph;            // write the training graph's picture there (.svg, .png, .dot)
  bool graph_collapse = false;  // ... with each fused region as one box
  std::string trace;            // write a Chrome trace of the traced steps there
  bool profile = false;         // print where the traced steps' time goes
  std::int64_t trace_first = 5; // the first traced step (after the warm-up)
  std::int64_t trace_steps = 10;
  bool log_device_placement = false;
};

/// Parses the command line into f. Returns the exit code when the program should stop instead of
/// training: 0 after --help (usage on stdout), 2 after a bad flag (the reason on stderr). Error
/// messages start with argv[0]'s file name.
std::optional<int> parse_flags(int argc, char** argv, flags& f);

} // namespace mnist
