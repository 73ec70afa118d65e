// jsonl_log.cpp: see jsonl_log.h.
#include "observe/jsonl_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace zt {

std::vector<std::string> jsonl_lines_through(const std::string& path, int64_t max_step) {
  std::vector<std::string> keep;
  std::ifstream in(path, std::ios::binary);
  if (!in) return keep;  // no file yet: nothing to keep
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  int64_t line_no = 0;
  for (size_t b = 0; b < all.size();) {
    size_t e = all.find('\n', b);
    ++line_no;
    if (e == std::string::npos) break;  // torn last line (see the header): dropped
    const std::string line = all.substr(b, e - b);
    b = e + 1;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ZT_CHECK(!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer(), path, " line ",
             line_no, " is damaged (not a JSON object with an integer \"step\": ",
             quote(line.size() > 60 ? line.substr(0, 57) + "..." : line),
             "); delete that line (or the file) and resume again");
    if (j["step"].get<int64_t>() <= max_step) keep.push_back(line);
  }
  return keep;
}

JsonlLog::JsonlLog(std::string path, int64_t keep_through_step) : path_(std::move(path)) {
  std::string kept;
  if (keep_through_step > 0)
    for (auto& l : jsonl_lines_through(path_, keep_through_step)) kept += l + "\n";
  // Replaced in one rename: the old file stays whole until the new one is on disk.
  write_file_atomic(path_, kept);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  ZT_CHECK(fd_ >= 0, "cannot open ", path_, " for appending: ", std::strerror(errno));
}

JsonlLog::~JsonlLog() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlLog::append(const std::string& line) {
  const std::string s = line + "\n";
  // One write() per line, so a kill leaves whole lines; a short write is retried.
  write_all(fd_, s.data(), s.size(), path_,
            "free disk space (or fix the output folder) and resume with --resume_from_checkpoint latest");
}

}  // namespace zt
