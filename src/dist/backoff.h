// backoff.h: how the communicator polls while it waits for other ranks. The first moments of a
// wait are the common case (a peer a few microseconds behind) and are polled at full speed;
// a longer wait (a peer still computing, stopped or hung) must not burn a core the others'
// computation needs, so after `spin` the polls are spaced by sleeps that double from 10 us up
// to `max_sleep`. A late peer then costs at most max_sleep of extra latency.
// It deliberately is not adaptive or shared between waits: each wait starts fresh.
#pragma once
#include <algorithm>
#include <chrono>
#include <thread>

namespace zt::dist {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Backoff(std::chrono::microseconds spin = std::chrono::microseconds(2000),
                   std::chrono::microseconds max_sleep = std::chrono::microseconds(1000))
      : spin_(spin), max_sleep_(max_sleep), start_(Clock::now()) {}
  // The pause before the next poll: zero while spinning, then 10 us, 20 us, ... max_sleep.
  std::chrono::microseconds next() {
    if (Clock::now() - start_ < spin_) return std::chrono::microseconds(0);
    sleep_ = sleep_.count() == 0 ? std::chrono::microseconds(10) : std::min(2 * sleep_, max_sleep_);
    return sleep_;
  }
  // Waits next(): a yield while spinning, else a sleep.
  void pause() {
    const auto d = next();
    if (d.count() == 0)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(d);
  }
  // Something completed: the next wait starts spinning again.
  void reset() {
    start_ = Clock::now();
    sleep_ = std::chrono::microseconds(0);
  }

 private:
  std::chrono::microseconds spin_, max_sleep_;
  Clock::time_point start_;
  std::chrono::microseconds sleep_{0};
};

}  // namespace zt::dist
