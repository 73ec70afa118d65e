// signals.cpp: see signals.h.
#include "signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/mapped_files.h"

namespace zt::app {
namespace {

// Built before any signal can arrive: the handler only copies bytes (async-signal-safe).
char g_prefix[64] = "ztrain: error: ";

void put(const char* s) {
  for (size_t n = std::strlen(s); n > 0;) {
    ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

void on_sigbus(int, siginfo_t* si, void*) {
  const char* path = mapped_file_find(si->si_addr);
  if (!path && si->si_code != BUS_ADRERR) {
    // Not a read past the end of a mapped file (a hardware memory error): the default action.
    ::signal(SIGBUS, SIG_DFL);
    return;  // the faulting access runs again and ends the process as before
  }
  put(g_prefix);
  if (path) {
    put(path);
    put(" was truncated while it was being read (SIGBUS on its memory mapping); a file must not be modified "
        "during a run: restore it and resume with --resume_from_checkpoint latest\n");
  } else {
    put("a memory-mapped file (model.safetensors or a checkpoint file) was truncated while it was being read "
        "(SIGBUS); restore it and run again\n");
  }
  ::_exit(1);
}

}  // namespace

void install_signal_handlers() {
  // Under mpirun the line names the rank, like the other errors of a job.
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* r = std::getenv(v)) {
      std::strcpy(g_prefix, "[rank ");
      std::strncat(g_prefix, r, 16);
      std::strcat(g_prefix, "] error: ");
      break;
    }
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
}

}  // namespace zt::app
