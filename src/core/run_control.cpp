// run_control.cpp: see run_control.h.
#include "core/run_control.h"

#include <csignal>
#include <cstdio>

namespace zt {

const char* stop_signal_name(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default: {
      static thread_local char buf[32];
      std::snprintf(buf, sizeof buf, "signal %d", signo);
      return buf;
    }
  }
}

}  // namespace zt
