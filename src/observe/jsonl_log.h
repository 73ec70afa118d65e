// jsonl_log.h: metrics.jsonl, one JSON object per line, written so that no kill loses a line
// a checkpoint depends on. On resume the lines up to the checkpoint's step are kept: they are
// written to a temporary file, fsynced and renamed over the old file, which is then only ever
// appended to, one write() per line. A kill at any moment therefore leaves either the old file
// (every line it had) or the new one (the kept lines plus whole appended lines), never fewer.
// Write errors (a full disk) throw naming the file; a damaged line read on resume throws naming
// the file and the line number.
// It deliberately is not a general JSON store: it knows only the integer "step" key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

class JsonlLog {
 public:
  // Starts path holding the existing lines with "step" <= keep_through_step (none when 0).
  JsonlLog(std::string path, int64_t keep_through_step);
  ~JsonlLog();
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;
  // Appends one line (a newline is added) and hands it to the kernel before returning.
  void append(const std::string& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The lines of a metrics.jsonl with "step" <= max_step, in order. A last line without its
// newline is a write cut short by a crash and is dropped (its step is past every checkpoint:
// a checkpoint is saved only after its step's line is written). Throws on any other bad line.
std::vector<std::string> jsonl_lines_through(const std::string& path, int64_t max_step);

}  // namespace zt
