// The character-level examples' flags, corpus, batches and replay files (see io.hpp).
#include "io.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <vector>

#include "../cli.hpp"
#include "../replay_dir.hpp"
#include "typeflow/core/error.hpp"

namespace examples::text {

namespace fs = std::filesystem;
namespace ty = typeflow;

std::optional<int> parse_flags(int argc, char** argv, const char* description, options& o) {
  CLI::App app(description, cli::program_name(argc, argv, "text"));
  cli::configure(app);
  const auto positive = cli::number_check(false), non_negative = cli::number_check(true);
  app.add_option("--steps", o.steps, "training steps")->check(positive);
  app.add_option("--batch-size", o.batch_size, "sequences per step")->check(positive);
  app.add_option("--learning-rate", o.learning_rate, "Adam's learning rate")->check(positive);
  app.add_option("--data", o.data, "a text file or a directory of them");
  app.add_option("--seed", o.seed, "the session's and the batches' seed");
  app.add_option("--log-every", o.log_every, "steps between log lines")->check(positive);
  app.add_option("--threads", o.threads, "CPU threads (0: all)")->check(non_negative);
  app.add_option("--sample", o.sample, "bytes of text to generate at the end")->check(non_negative);
  app.add_option("--temperature", o.temperature, "sampling temperature")->check(positive);
  app.add_option("--replay", o.replay,
                 "a directory to write the initial variables, batches and losses into "
                 "(for replay_torch.py)");
  return cli::parse(app, argc, argv);
}

replay_files::replay_files(const std::string& dir) {
  examples::create_replay_directory(dir);
  batches_.open(fs::path(dir) / "batches.bin", std::ios::binary);
  losses_.open(fs::path(dir) / "losses.txt");
  if (!batches_ || !losses_)
    throw ty::error("cannot write the replay files in " + dir);
}

void replay_files::step(const ty::tensor<std::int32_t>& x, const ty::tensor<std::int32_t>& y,
                        float loss) {
  static_assert(std::endian::native == std::endian::little);
  for (const auto* t : {&x, &y})
    batches_.write(reinterpret_cast<const char*>(t->data()),
                   static_cast<std::streamsize>(t->size()) *
                       static_cast<std::streamsize>(sizeof(std::int32_t)));
  char line[32];
  std::snprintf(line, sizeof line, "%.9g\n", static_cast<double>(loss));
  losses_ << line;
  if (!batches_ || !losses_)
    throw ty::error("writing the replay files failed");
}

std::string read_corpus(const std::string& where, std::int64_t vocab, std::int64_t context) {
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

void draw(const std::string& text, std::int64_t batch, std::int64_t context, std::mt19937_64& rng,
          ty::tensor<std::int32_t>& x, ty::tensor<std::int32_t>& y) {
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

} // namespace examples::text
