// Mini-batching for training (like TensorFlow's shuffle_batch with queue runners): a background
// thread cuts an in-memory dataset into batches, reshuffled every epoch with a permutation that
// is a portable, deterministic function of (seed, epoch), and keeps a few batches queued ahead.
#pragma once

#include "../core/compiled.hpp"
#include "../core/error.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace typeflow::data {

/// One mini-batch: `size` examples, `images` holds size * example_size floats (one example after
/// the other), `labels` holds size labels. `index_in_epoch` counts batches within `epoch`.
struct batch {
  std::int64_t size = 0;
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  std::int64_t epoch = 0;
  std::int64_t index_in_epoch = 0;
};

struct batcher_options {
  std::int64_t batch_size = 128;
  bool shuffle = true;      ///< reshuffle every epoch; false: examples in their original order
  std::uint64_t seed = 0;   ///< the permutation of epoch e depends only on (seed, e)
  bool drop_last = false;   ///< drop each epoch's last, partial batch instead of returning it
  std::size_t prefetch = 2; ///< batches queued ahead by the background thread (0 counts as 1)
  /// Optional hook run on the background thread on each batch before it is queued (e.g. data
  /// augmentation). An exception it throws is rethrown by batcher::next().
  std::function<void(batch&)> on_batch = nullptr;
};

/// Serves batches of an in-memory dataset forever (epoch after epoch), produced by a background
/// thread. The batcher owns its copy of the data (the vectors are taken by value: move them in
/// to avoid copying), so the caller's vectors may go away. Not copyable or movable.
class batcher {
public:
  batcher(std::vector<float> images, std::vector<std::int32_t> labels, std::int64_t example_size,
          batcher_options opts);

  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;

  /// Stops the background thread and joins it, also when batches are still queued.
  ~batcher() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stop_ = true;
    }
    not_full_.notify_all();
    if (worker_.joinable())
      worker_.join();
  }

  std::int64_t batches_per_epoch() const noexcept { return batches_per_epoch_; }
  std::int64_t examples() const noexcept { return count_; }

  /// The next batch (blocks until the background thread has produced it). Rethrows an
  /// exception thrown on the background thread (after the batches queued before it).
  batch next();

  /// The order in which epoch `epoch` visits the examples of a dataset of `count` examples with
  /// `seed`: Fisher-Yates driven by std::mt19937_64 seeded (through std::seed_seq) from seed and
  /// epoch, with unbiased bounded draws by rejection; all of it fully specified, so the order
  /// is the same on every platform and standard library.
  static std::vector<std::int64_t> permutation(std::int64_t count, std::uint64_t seed,
                                               std::int64_t epoch) {
    std::vector<std::int64_t> perm(static_cast<std::size_t>(count));
    fill_permutation(perm, seed, epoch);
    return perm;
  }

private:
  static void fill_permutation(std::vector<std::int64_t>& perm, std::uint64_t seed,
                               std::int64_t epoch);

  batch make_batch(const std::vector<std::int64_t>& order, std::int64_t epoch,
                   std::int64_t index) const;

  void run() noexcept;

  const std::vector<float> images_;
  const std::vector<std::int32_t> labels_;
  const std::int64_t example_size_;
  const batcher_options opts_;
  std::int64_t count_ = 0;
  std::int64_t batches_per_epoch_ = 0;
  std::size_t capacity_ = 1;

  std::mutex mutex_;
  std::condition_variable not_full_;  ///< producer waits for room (or stop)
  std::condition_variable not_empty_; ///< consumer waits for a batch (or a failure)
  std::deque<batch> queue_;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread worker_;
};

#if TYPEFLOW_BODIES
TYPEFLOW_DECL batcher::batcher(std::vector<float> images, std::vector<std::int32_t> labels,
                               std::int64_t example_size, batcher_options opts)
    : images_(std::move(images)), labels_(std::move(labels)), example_size_(example_size),
      opts_(std::move(opts)) {
  if (opts_.batch_size < 1)
    throw error("batcher: batch_size must be >= 1, got " + std::to_string(opts_.batch_size));
  if (example_size_ < 1)
    throw error("batcher: example_size must be >= 1, got " + std::to_string(example_size_));
  const auto es = static_cast<std::size_t>(example_size_);
  if (images_.size() % es != 0 || images_.size() / es != labels_.size())
    throw error("batcher: images has " + std::to_string(images_.size()) +
                " floats, expected labels.size() (" + std::to_string(labels_.size()) +
                ") x example_size (" + std::to_string(example_size_) + ")");
  count_ = static_cast<std::int64_t>(labels_.size());
  if (count_ == 0)
    throw error("batcher: the dataset is empty, no batch could ever be produced");
  if (opts_.drop_last && count_ < opts_.batch_size)
    throw error("batcher: drop_last with " + std::to_string(count_) + " examples and batch_size " +
                std::to_string(opts_.batch_size) + ": no batch could ever be produced");
  batches_per_epoch_ = opts_.drop_last ? count_ / opts_.batch_size
                                       : (count_ + opts_.batch_size - 1) / opts_.batch_size;
  capacity_ = opts_.prefetch == 0 ? 1 : opts_.prefetch;
  worker_ = std::thread([this] { run(); }); // last: everything it reads is set up
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL batch batcher::next() {
  std::unique_lock<std::mutex> lk(mutex_);
  not_empty_.wait(lk, [this] { return !queue_.empty() || failure_; });
  if (queue_.empty())
    std::rethrow_exception(failure_);
  batch b = std::move(queue_.front());
  queue_.pop_front();
  lk.unlock();
  not_full_.notify_one();
  return b;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL void batcher::fill_permutation(std::vector<std::int64_t>& perm, std::uint64_t seed,
                                             std::int64_t epoch) {
  for (std::size_t i = 0; i < perm.size(); ++i)
    perm[i] = static_cast<std::int64_t>(i);
  const auto e = static_cast<std::uint64_t>(epoch);
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(e >> 32)};
  std::mt19937_64 gen(seq);
  for (std::size_t i = perm.size(); i > 1; --i) {
    const std::uint64_t bound = i; // draw j uniformly in [0, i)
    const std::uint64_t threshold = (0 - bound) % bound;
    std::uint64_t r = gen();
    while (r < threshold)
      r = gen();
    std::swap(perm[i - 1], perm[static_cast<std::size_t>(r % bound)]);
  }
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL batch batcher::make_batch(const std::vector<std::int64_t>& order, std::int64_t epoch,
                                        std::int64_t index) const {
  const std::int64_t begin = index * opts_.batch_size;
  const std::int64_t end = std::min(begin + opts_.batch_size, count_);
  const auto es = static_cast<std::size_t>(example_size_);
  batch b;
  b.size = end - begin;
  b.epoch = epoch;
  b.index_in_epoch = index;
  b.images.resize(static_cast<std::size_t>(b.size) * es);
  b.labels.resize(static_cast<std::size_t>(b.size));
  for (std::int64_t k = 0; k < b.size; ++k) {
    const auto src = static_cast<std::size_t>(order[static_cast<std::size_t>(begin + k)]);
    const auto dst = static_cast<std::size_t>(k);
    std::copy_n(images_.begin() + static_cast<std::ptrdiff_t>(src * es), es,
                b.images.begin() + static_cast<std::ptrdiff_t>(dst * es));
    b.labels[dst] = labels_[src];
  }
  return b;
}
#endif

#if TYPEFLOW_BODIES
TYPEFLOW_DECL void batcher::run() noexcept {
  try {
    std::vector<std::int64_t> order(static_cast<std::size_t>(count_));
    for (std::int64_t epoch = 0;; ++epoch) {
      if (opts_.shuffle)
        fill_permutation(order, opts_.seed, epoch);
      else
        for (std::size_t i = 0; i < order.size(); ++i)
          order[i] = static_cast<std::int64_t>(i);
      for (std::int64_t index = 0; index < batches_per_epoch_; ++index) {
        {
          std::unique_lock<std::mutex> lk(mutex_);
          not_full_.wait(lk, [this] { return stop_ || queue_.size() < capacity_; });
          if (stop_)
            return;
        }
        batch b = make_batch(order, epoch, index);
        if (opts_.on_batch)
          opts_.on_batch(b);
        {
          std::lock_guard<std::mutex> lk(mutex_);
          if (stop_)
            return;
          queue_.push_back(std::move(b));
        }
        not_empty_.notify_one();
      }
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      failure_ = std::current_exception();
    }
    not_empty_.notify_all();
  }
}
#endif

} // namespace typeflow::data
