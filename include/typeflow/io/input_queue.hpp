// The seed's input pipeline (TensorFlow 1.x queue runners) over TFRecord files:
//   string_input_producer(files, num_epochs, shuffle)  ->  `num_threads` readers, each taking the
//   next file, reading its records and decoding each into an example  ->  a bounded example
//   queue  ->  shuffle_batch(batch_size, capacity, min_after_dequeue) or batch.
// next() returns the next batch of decoded examples; after the last epoch it throws
// data::out_of_range (the seed's OutOfRangeError), having returned every example once per epoch.
// The readers block while the queue holds `capacity` examples (bounded memory), a reader's error
// (a corrupt record) is rethrown by next(), and the destructor (or request_stop(), the seed's
// Coordinator) stops and joins the readers.
//
// Reproducible: with one reader thread the sequence of batches is a function of the seed (each
// shuffled dequeue waits for a full queue); with several, examples interleave as the readers run
// (as in TensorFlow).
#pragma once

#include "../core/error.hpp"
#include "tfrecord.hpp"

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
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace typeflow::data {

/// End of input: every epoch of every file was served (tf.errors.OutOfRangeError).
class out_of_range : public error {
public:
  using error::error;
};

struct input_options {
  std::vector<std::string> files;
  io::tfrecord_compression compression = io::tfrecord_compression::none;
  std::int64_t num_epochs = 1; ///< passes over the files; 0: forever
  bool shuffle_files = false;  ///< each epoch's file order shuffled (string_input_producer)
  int num_threads = 1;         ///< reader threads
  std::int64_t batch_size = 128;
  bool shuffle = true;                    ///< shuffle_batch; false: batch (examples in order)
  std::size_t capacity = 1000 + 3 * 128;  ///< examples the queue holds at most
  std::size_t min_after_dequeue = 1000;   ///< shuffle_batch: examples left after a dequeue
  bool allow_smaller_final_batch = false; ///< the last batch of the input may be short
  std::uint64_t seed = 0;
};

/// Batches of examples of type E decoded from TFRecord files by `decode(record, where)`, where
/// `where` names the record ("record 7 of train.tfrecord") for its errors.
template <class E>
class input_queue {
public:
  using decoder = std::function<E(std::string_view record, std::string_view where)>;

  input_queue(input_options o, decoder decode) : o_(std::move(o)), decode_(std::move(decode)) {
    if (o_.files.empty())
      throw error("input_queue: no files");
    if (o_.batch_size < 1)
      throw error("input_queue: batch_size must be >= 1, got " + std::to_string(o_.batch_size));
    if (o_.num_threads < 1)
      throw error("input_queue: num_threads must be >= 1");
    if (o_.num_epochs < 0)
      throw error("input_queue: num_epochs must be >= 0 (0: forever)");
    const auto need =
        static_cast<std::size_t>(o_.batch_size) + (o_.shuffle ? o_.min_after_dequeue : 0);
    if (o_.capacity < need)
      throw error("input_queue: capacity " + std::to_string(o_.capacity) +
                  " is below batch_size + min_after_dequeue = " + std::to_string(need) +
                  " (no batch could be dequeued)");
    rng_.seed(o_.seed);
    for (int t = 0; t < o_.num_threads; ++t)
      readers_.emplace_back([this] { read_loop(); });
  }
  input_queue(const input_queue&) = delete;
  input_queue& operator=(const input_queue&) = delete;
  ~input_queue() { request_stop(); }

  /// The next batch: batch_size examples (fewer only for the input's last batch, with
  /// allow_smaller_final_batch). Throws out_of_range at the end of the input, or a reader's
  /// error.
  std::vector<E> next() {
    std::unique_lock lock(mu_);
    const auto bs = static_cast<std::size_t>(o_.batch_size);
    const std::size_t keep = o_.shuffle ? o_.min_after_dequeue : 0;
    // One reader: dequeue from a full queue, so that what is in it, and so the batch, depends on
    // the seed alone and not on how far the reader got.
    const std::size_t want = o_.shuffle && o_.num_threads == 1 ? o_.capacity : bs + keep;
    ready_.wait(lock, [&] { return failure_ || queue_.size() >= want || finished(); });
    if (failure_)
      std::rethrow_exception(failure_);
    std::size_t take = bs;
    if (queue_.size() < bs) { // the input has ended
      if (queue_.empty() || !o_.allow_smaller_final_batch)
        throw out_of_range(
            "input_queue: end of input after " + std::to_string(served_) + " examples (" +
            std::to_string(o_.num_epochs) + " epoch" + (o_.num_epochs == 1 ? "" : "s") + " of " +
            std::to_string(o_.files.size()) + " file" + (o_.files.size() == 1 ? "" : "s") + ")");
      take = queue_.size();
    }
    std::vector<E> batch;
    batch.reserve(take);
    for (std::size_t i = 0; i < take; ++i) {
      if (o_.shuffle) { // a uniformly random element, as RandomShuffleQueue dequeues
        std::uniform_int_distribution<std::size_t> pick(0, queue_.size() - 1);
        std::swap(queue_[pick(rng_)], queue_.back());
        batch.push_back(std::move(queue_.back()));
        queue_.pop_back();
      } else {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    served_ += take;
    space_.notify_all();
    return batch;
  }

  /// Stops the readers and joins them (the seed's coord.request_stop(); coord.join()).
  void request_stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    ready_.notify_all();
    for (auto& t : readers_)
      if (t.joinable())
        t.join();
  }
  /// Examples decoded and waiting (at most capacity).
  std::size_t queued() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }
  /// Examples returned by next() so far.
  std::uint64_t served() const {
    std::lock_guard lock(mu_);
    return served_;
  }

private:
  bool finished() const { return active_ == 0 && files_done_; }

  /// The next file to read, or false when the producer is exhausted (or stopping).
  bool next_file(std::string& path) {
    std::lock_guard lock(mu_);
    if (stop_ || failure_)
      return false;
    if (file_pos_ == order_.size()) {
      if (o_.num_epochs != 0 && epoch_ == o_.num_epochs) {
        files_done_ = true;
        return false;
      }
      order_.resize(o_.files.size());
      for (std::size_t i = 0; i < order_.size(); ++i)
        order_[i] = i;
      if (o_.shuffle_files) {
        std::mt19937_64 r(o_.seed ^
                          (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(epoch_ + 1)));
        std::shuffle(order_.begin(), order_.end(), r);
      }
      file_pos_ = 0;
      ++epoch_;
    }
    path = o_.files[order_[file_pos_++]];
    ++active_;
    return true;
  }

  void read_loop() {
    std::string path, rec;
    try {
      while (next_file(path)) {
        io::tfrecord_reader r(path, o_.compression);
        while (r.next(rec)) {
          const std::string where = "record " + std::to_string(r.records() - 1) + " of " + path;
          E e = decode_(rec, where);
          std::unique_lock lock(mu_);
          space_.wait(lock, [&] { return stop_ || queue_.size() < o_.capacity; });
          if (stop_)
            return;
          queue_.push_back(std::move(e));
          ready_.notify_all();
        }
        std::lock_guard lock(mu_);
        --active_;
        ready_.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!failure_)
        failure_ = std::current_exception();
      ready_.notify_all();
      return;
    }
    std::lock_guard lock(mu_);
    ready_.notify_all();
  }

  input_options o_;
  decoder decode_;
  mutable std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<E> queue_;
  std::vector<std::size_t> order_;
  std::size_t file_pos_ = 0;
  std::int64_t epoch_ = 0;
  int active_ = 0;          ///< files being read
  bool files_done_ = false; ///< the producer has no more files
  bool stop_ = false;
  std::exception_ptr failure_;
  std::uint64_t served_ = 0;
  std::mt19937_64 rng_;
  std::vector<std::jthread> readers_;
};

} // namespace typeflow::data
