// signals.h: the process-wide signal handling of the ztrain binary (only apps/ may end the
// process). SIGBUS, raised by reading a page of a memory-mapped file that was truncated,
// becomes one error line naming the file (the library registers its mappings in
// core/mapped_files.h) and exit code 1, instead of a silent death with code 135.
// Training also turns SIGTERM / SIGINT / SIGUSR1 into a graceful stop (install_stop_handlers).
#pragma once

namespace zt::app {

// Installs the handlers; call once at start. Idempotent.
void install_signal_handlers();
// `ztrain train`: SIGTERM, SIGINT and SIGUSR1 request a graceful stop (core/run_control.h;
// the trainer saves and exits 0 at the next step boundary); a second one exits at once with
// 128 + the signal number. Blocks the signals in the calling thread (a watcher thread takes
// them), so call it before any other thread starts. Idempotent.
void install_stop_handlers();

}  // namespace zt::app
