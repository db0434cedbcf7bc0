// The main job's log line, shared by the examples that train (gpt, resnet):
//   step N, loss = X.XXXX (N.N examples/sec; N.NNN sec/batch)
// at step 1, every `every` steps and at the last step; the rates are over the steps since the
// previous line. (examples/mnist prints the seed's own form, with a timestamp first.)
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace examples {

class step_log {
public:
  step_log(std::int64_t batch_size, std::int64_t every, std::int64_t last_step)
      : batch_(batch_size), every_(every), last_step_(last_step) {}

  /// Call after each step with its loss; prints when the step is one to log.
  void after(std::int64_t step, float loss) {
    if (step % every_ != 0 && step != 1 && step != last_step_)
      return;
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - since_).count();
    const std::int64_t n = step == 1 ? 1 : (step % every_ == 0 ? every_ : step % every_);
    std::printf("step %lld, loss = %.4f (%.1f examples/sec; %.3f sec/batch)\n",
                static_cast<long long>(step), static_cast<double>(loss),
                static_cast<double>(n * batch_) / dt, dt / static_cast<double>(n));
    std::fflush(stdout);
    since_ = now;
  }

private:
  std::int64_t batch_, every_, last_step_;
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
};

} // namespace examples
