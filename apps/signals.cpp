// signals.cpp: see signals.h.
#include "signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/mapped_files.h"
#include "core/run_control.h"

namespace zt::app {
namespace {

// Built before any signal can arrive: the handler only copies bytes (async-signal-safe).
char g_prefix[64] = "ztrain: error: ";
char g_note[64] = "ztrain: ";

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

// SIGTERM / SIGINT / SIGUSR1 during training: the first asks the trainer to stop at the next
// step boundary (it saves, then exits 0); a second one ends the process at once. Only
// checkpoints written whole exist (checkpoint-N.tmp folders are ignored), so the newest
// complete checkpoint stays intact.
// The signals are blocked in every thread and taken by one watcher thread with sigwait, not by
// a handler: a handler interrupts whichever thread runs, and once in 6 runs a signal landing
// inside oneDNN's sgemm left the heap corrupted ("corrupted size vs. prev_size" in its next
// free); no computing thread is ever interrupted this way.
void stop_watch(sigset_t set) {
  for (;;) {
    int signo = 0;
    if (::sigwait(&set, &signo) != 0) continue;
    const int before = stop_request(signo);
    const char* name = signo == SIGTERM ? "SIGTERM" : signo == SIGINT ? "SIGINT" : "SIGUSR1";
    put(g_note);
    put(name);
    if (before == 0) {
      put(" received: finishing this step, saving a checkpoint, then exiting (send it again to exit at once)\n");
      continue;
    }
    put(" received again: exiting now; the newest complete checkpoint is intact\n");
    ::_exit(128 + signo);
  }
}

}  // namespace

void install_stop_handlers() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, s);
  // Threads inherit the mask: this must run before any other thread starts (MPI's, OpenMP's).
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(stop_watch, set).detach();
}

void install_signal_handlers() {
  // Under mpirun the line names the rank, like the other errors of a job.
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* r = std::getenv(v)) {
      std::strcpy(g_prefix, "[rank ");
      std::strncat(g_prefix, r, 16);
      std::strcat(g_prefix, "] error: ");
      std::strcpy(g_note, "[rank ");
      std::strncat(g_note, r, 16);
      std::strcat(g_note, "] ");
      break;
    }
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
  // A write past a file-size limit (ulimit -f) then fails with EFBIG, which the writer reports as
  // one line naming the file (offload's scratch file, a checkpoint), instead of killing the process.
  ::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace zt::app
