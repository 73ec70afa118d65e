// signals.h: the process-wide signal handling of the ztrain binary (only apps/ may end the
// process). SIGBUS, raised by reading a page of a memory-mapped file that was truncated,
// becomes one error line naming the file (the library registers its mappings in
// core/mapped_files.h) and exit code 1, instead of a silent death with code 135.
#pragma once

namespace zt::app {

// Installs the handlers; call once at start. Idempotent.
void install_signal_handlers();

}  // namespace zt::app
