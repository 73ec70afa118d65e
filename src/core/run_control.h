// run_control.h: process-wide state of a training run that code far from the trainer needs:
// a "please stop" set by the signal watcher (apps/signals.cpp: SIGTERM, SIGINT, SIGUSR1 during
// `ztrain train`) and read by the trainer at each step boundary, where the ranks agree on it and
// stop after saving (docs/fault-tolerance.md); and the training step the process is in, which the
// collective watchdog names when a collective times out (dist/mpi_communicator.cpp).
// Process-wide by nature, like signals; lock-free and async-signal-safe.
#pragma once
#include <atomic>
#include <cstdint>

namespace zt {

namespace detail {
inline std::atomic<int> g_stop_signal{0};
inline std::atomic<int64_t> g_train_step{-1};
}  // namespace detail

// The optimizer step (1-based) the trainer is computing; -1 outside the step loop.
inline void train_step_set(int64_t step) { detail::g_train_step.store(step, std::memory_order_relaxed); }
inline int64_t train_step_current() { return detail::g_train_step.load(std::memory_order_relaxed); }

// Records the first stop request (its signal number); later ones do not replace it.
// Returns the signal already recorded (0 if this is the first request).
inline int stop_request(int signo) {
  int none = 0;
  if (detail::g_stop_signal.compare_exchange_strong(none, signo)) return 0;
  return none;
}
// The signal of the first stop request, 0 when none.
inline int stop_requested() { return detail::g_stop_signal.load(std::memory_order_relaxed); }
// For tests: forget a request.
inline void stop_request_clear() { detail::g_stop_signal.store(0); }

// "SIGTERM", "SIGINT", "SIGUSR1", else "signal N" (static storage; not for signal handlers).
const char* stop_signal_name(int signo);

}  // namespace zt
