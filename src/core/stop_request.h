// stop_request.h: a process-wide "please stop" set from a signal handler (apps/signals.cpp:
// SIGTERM, SIGINT, SIGUSR1 during `ztrain train`) and read by the trainer at each step
// boundary, where the ranks agree on it and stop after saving (docs/fault-tolerance.md).
// Process-wide by nature, like signals; lock-free and async-signal-safe.
#pragma once
#include <atomic>

namespace zt {

namespace detail {
inline std::atomic<int> g_stop_signal{0};
}

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
