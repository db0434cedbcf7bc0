// The main job's data: the training batches, from memory (IDX files through the batcher, each
// epoch's last batch short) or streamed from TFRecord files through the seed's queue
// (shuffle_batch over all epochs; a short last batch of the whole input is dropped, as the
// seed's), and the test split, with --train-limit and --test-limit applied. Not a template:
// data.cpp compiles it once, not once per training configuration of main.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "flags.hpp"
#include "typeflow/io/batch.hpp"
#include "typeflow/io/idx.hpp"

namespace mnist {

class training_data {
public:
  /// Reads f.data_dir in f.data_format and starts producing batches of f.batch_size for
  /// f.epochs epochs, shuffled with f.seed.
  explicit training_data(const flags& f);
  ~training_data();
  training_data(const training_data&) = delete;
  training_data& operator=(const training_data&) = delete;

  /// The next training batch (blocks until it is ready).
  typeflow::data::batch next();
  /// The training images (after --train-limit).
  std::int64_t train_count() const { return train_count_; }
  /// The steps of the whole run.
  std::int64_t total_steps() const { return total_steps_; }
  /// The epoch that step `step` (from 0) belongs to.
  std::int64_t epoch_of(std::int64_t step) const;
  /// The test split (after --test-limit).
  const typeflow::data::mnist_split& test() const { return test_; }

private:
  struct queue; // the TFRecord input queue (data.cpp)
  typeflow::data::mnist_split test_;
  std::int64_t train_count_ = 0, total_steps_ = 0, batch_size_ = 1, per_epoch_ = 1;
  std::optional<typeflow::data::batcher> batches_;
  std::unique_ptr<queue> queue_;
};

} // namespace mnist
