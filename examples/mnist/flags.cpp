// The main job's command line, parsed with CLI11 (see flags.hpp).
#include "flags.hpp"

#include "../cli.hpp"

namespace mnist {

std::optional<int> parse_flags(int argc, char** argv, flags& f) {
  CLI::App app("Trains the seed's model on MNIST-format data (Fashion-MNIST by default).",
               examples::cli::program_name(argc, argv, "mnist"));
  examples::cli::configure(app);
  const auto positive = examples::cli::number_check(false);
  const auto non_negative = examples::cli::number_check(true);
  app.add_option("--epochs", f.epochs, "passes over the training set")->check(positive);
  app.add_option("--batch-size", f.batch_size, "examples per step")->check(positive);
  app.add_option("--learning-rate", f.learning_rate, "the first epoch's learning rate")
      ->check(positive);
  app.add_option("--lr-decay", f.lr_decay, "per epoch: lr_e = learning-rate * lr-decay^e")
      ->check(positive);
  app.add_option("--threads", f.threads, "CPU threads (0: one per core)")->check(non_negative);
  app.add_option("--data-dir", f.data_dir,
                 "directory of MNIST-format (IDX) files, or of train*.tfrecord and test.tfrecord");
  app.add_option("--data-format", f.data_format,
                 "idx, or tfrecord (the seed's Examples: image_raw bytes, label int64; read "
                 "through the seed's input queue: shuffle_batch, --reader-threads readers)")
      ->check(CLI::IsMember({"idx", "tfrecord"}));
  app.add_option("--reader-threads", f.reader_threads, "TFRecord reader threads (the seed's 2)")
      ->check(positive);
  CLI::Option* checkpoint_dir = app.add_option("--checkpoint-dir", f.checkpoint_dir,
                                               "write model.safetensors there after every epoch");
  app.add_flag("--resume", f.resume, "continue from the checkpoint in --checkpoint-dir")
      ->needs(checkpoint_dir);
  app.add_option("--seed", f.seed, "seed of the initializers and the batch order")
      ->check(non_negative);
  app.add_option("--train-limit", f.train_limit, "use only the first N training examples (0: all)")
      ->check(non_negative);
  app.add_option("--test-limit", f.test_limit,
                 "measure the test accuracy on the first N test examples only (0: all)")
      ->check(non_negative);
  app.add_option("--log-every", f.log_every, "log the loss every N steps")->check(positive);
  app.add_option("--placement", f.placement,
                 "cpu, gpu or variables-on-cpu (the GPU policies need the CUDA build)")
      ->check(CLI::IsMember({"cpu", "gpu", "variables-on-cpu"}));
  app.add_option("--precision", f.precision,
                 "float32; bfloat16: convolutions and matmuls on bfloat16 operands with "
                 "float32 accumulation (CPUs with native bfloat16, float32 on others; a GPU's "
                 "tensor cores); float16: on float16-rounded operands (emulated on the CPU), "
                 "with dynamic loss scaling")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_option("--replicas", f.replicas, "towers, each on its share of every batch")
      ->check(CLI::IsMember({1, 2}));
  app.add_option("--graph", f.graph,
                 "write the training graph's picture to FILE (.svg, .png or .pdf through "
                 "Graphviz's dot; .dot as text)");
  app.add_flag("--graph-collapse", f.graph_collapse, "draw each fused region as one box");
  app.add_option("--trace", f.trace,
                 "write a Chrome trace (Perfetto, chrome://tracing) of the traced steps to FILE");
  app.add_flag("--profile", f.profile,
               "print where the traced steps' time goes, per op, against the machine's roofs");
  app.add_option("--trace-first", f.trace_first, "the first traced step")->check(non_negative);
  app.add_option("--trace-steps", f.trace_steps, "how many steps --trace and --profile record")
      ->check(positive);
  app.add_flag("--log-device-placement", f.log_device_placement,
               "print every node's device when the training step first runs (TensorFlow's "
               "log_device_placement)");
  // The checks across flags that CLI11 cannot state.
  return examples::cli::parse(app, argc, argv, [&] {
    if (f.resume && f.checkpoint_dir.empty())
      throw CLI::ValidationError("--resume", "needs a non-empty --checkpoint-dir");
    if (f.train_limit > 0 && f.data_format == "tfrecord")
      throw CLI::ValidationError("--train-limit", "reads IDX files; for TFRecord write fewer "
                                                  "records (mnist_to_tfrecord --limit)");
    if (f.precision == "float16" && (f.placement != "cpu" || f.replicas != 1))
      throw CLI::ValidationError("--precision", "float16 trains with --placement cpu and one "
                                                "replica");
    if (f.replicas != 1 && f.placement == "gpu")
      throw CLI::ValidationError("--replicas", "2 on GPUs keeps the variables on the CPU, as the "
                                               "seed does: use --placement variables-on-cpu");
  });
}

} // namespace mnist
