// The main job's data (data.hpp).
#include "data.hpp"

#include <string>
#include <utility>
#include <vector>

#include "tfrecord_data.hpp"

namespace mnist {

struct training_data::queue {
  typeflow::data::input_queue<example> q;
};

training_data::training_data(const flags& f) : batch_size_(f.batch_size) {
  namespace ty = typeflow;
  const bool tfrecord = f.data_format == "tfrecord";
  ty::data::mnist_split train;
  std::vector<std::string> train_files;
  if (tfrecord) {
    train_files = tfrecord_files(f.data_dir, "train");
    test_ = load_tfrecord_split(tfrecord_files(f.data_dir, "test"));
    train.count = count_records(train_files);
  } else {
    train = ty::data::load_mnist(f.data_dir, true);
    test_ = ty::data::load_mnist(f.data_dir, false);
    if (train.rows != 28 || train.cols != 28 || test_.rows != 28 || test_.cols != 28)
      throw ty::error("mnist: expected 28x28 images in " + f.data_dir);
  }
  if (f.train_limit > 0 && f.train_limit < train.count) {
    train.count = f.train_limit;
    train.images.resize(static_cast<std::size_t>(train.count * 28 * 28));
    train.labels.resize(static_cast<std::size_t>(train.count));
  }
  if (f.test_limit > 0 && f.test_limit < test_.count) {
    test_.count = f.test_limit;
    test_.images.resize(static_cast<std::size_t>(test_.count * test_.rows * test_.cols));
    test_.labels.resize(static_cast<std::size_t>(test_.count));
  }
  train_count_ = train.count;
  if (tfrecord) {
    queue_.reset(new queue{ty::data::input_queue<example>(
        ty::data::input_options{.files = train_files,
                                .compression = compression_of(train_files[0]),
                                .num_epochs = f.epochs,
                                .shuffle_files = true,
                                .num_threads = f.reader_threads,
                                .batch_size = f.batch_size,
                                .capacity = static_cast<std::size_t>(1000 + 3 * f.batch_size),
                                .min_after_dequeue = 1000,
                                .seed = f.seed},
        decode)});
    total_steps_ = f.epochs * train_count_ / f.batch_size;
  } else {
    batches_.emplace(
        std::move(train.images), std::move(train.labels), 28 * 28,
        ty::data::batcher_options{.batch_size = f.batch_size, .shuffle = true, .seed = f.seed});
    per_epoch_ = batches_->batches_per_epoch();
    total_steps_ = per_epoch_ * f.epochs;
  }
}

training_data::~training_data() = default;

typeflow::data::batch training_data::next() {
  if (batches_)
    return batches_->next();
  typeflow::data::batch b;
  const auto examples = queue_->q.next();
  b.size = static_cast<std::int64_t>(examples.size());
  b.images.reserve(examples.size() * 28 * 28);
  for (const auto& e : examples) {
    b.images.insert(b.images.end(), e.pixels.begin(), e.pixels.end());
    b.labels.push_back(e.label);
  }
  return b;
}

std::int64_t training_data::epoch_of(std::int64_t step) const {
  return batches_ ? step / per_epoch_ : step * batch_size_ / train_count_;
}

} // namespace mnist
