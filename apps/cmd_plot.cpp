// cmd_plot.cpp: `ztrain plot`: the loss curves of several runs in one PNG (observe/plot_png.h),
// read from each run's trainer_state.json (HF's log_history), so optimizers, learning rates or
// layouts can be compared without TensorBoard. Files are untrusted: size-bounded, parsed as JSON,
// each missing or mistyped field one error naming the file.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "flags.h"
#include "observe/plot_png.h"

namespace zt::app {
namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t c = s.find(',', at);
    if (c == std::string::npos) c = s.size();
    if (c > at) out.push_back(s.substr(at, c - at));
    at = c + 1;
  }
  return out;
}

// (step, value) of `metric` in a run folder's trainer_state.json log_history.
std::vector<std::pair<double, double>> run_points(const std::string& run, const std::string& metric) {
  const std::string path = run + "/trainer_state.json";
  constexpr size_t kMaxBytes = size_t(256) << 20;  // a log of millions of steps still fits
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  ZT_CHECK(!ec, path, ": ", ec.message(), "; is ", run, " a ztrain or HF Trainer output folder?");
  ZT_CHECK(size <= kMaxBytes, path, " is ", size, " bytes, more than a training log holds (256 MiB)");
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  const nlohmann::json state = nlohmann::json::parse(text, nullptr, false);
  ZT_CHECK(!state.is_discarded() && state.is_object(), path, " is not a JSON object; is ", run,
           " a ztrain or HF Trainer output folder?");
  const auto it = state.find("log_history");
  ZT_CHECK(it != state.end() && it->is_array(), path, " has no \"log_history\" list");
  std::vector<std::pair<double, double>> points;
  for (const nlohmann::json& e : *it) {
    if (!e.is_object() || !e.contains(metric) || !e.contains("step")) continue;
    // The final summary entry has "train_loss", not "loss"; any other non-number is skipped.
    if (!e[metric].is_number() || !e["step"].is_number()) continue;
    points.emplace_back(e["step"].get<double>(), e[metric].get<double>());
  }
  ZT_CHECK(!points.empty(), path, " has no \"", metric, "\" entries; ",
           metric == "eval_loss" ? "the run evaluated never (--eval_steps)" : "the run logged no steps",
           " (or use --metric loss / eval_loss)");
  return points;
}

}  // namespace

int cmd_plot(const Args& args) {
  FlagSet f("plot");
  std::string runs, labels, metric = "eval_loss", output, title;
  f.add("runs", &runs, "comma-separated output folders, each with a trainer_state.json");
  f.add("labels", &labels, "comma-separated legend names, one per run (the folder names)");
  f.add("metric", &metric, "loss | eval_loss: which log_history values to draw (eval_loss)");
  f.add("output", &output, "the PNG to write");
  f.add("title", &title, "the picture's title (the metric)");
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  ZT_CHECK(metric == "loss" || metric == "eval_loss", "--metric ", quote(metric),
           " is not known; use loss or eval_loss");
  const std::vector<std::string> dirs = split_list(runs), names = split_list(labels);
  ZT_CHECK(!dirs.empty(), "ztrain plot needs --runs DIR1,DIR2,...");
  ZT_CHECK(!output.empty(), "ztrain plot needs --output FILE.png");
  ZT_CHECK(names.empty() || names.size() == dirs.size(), "--labels has ", names.size(), " names for ", dirs.size(),
           " runs; give one per run");
  // Ten distinguishable colours (the Tableau palette's order), reused past ten runs.
  static constexpr uint32_t kColors[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                         0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
  std::vector<PlotSeries> series;
  for (size_t i = 0; i < dirs.size(); ++i) {
    std::string name = names.empty() ? dirs[i] : names[i];
    if (names.empty() && name.find('/') != std::string::npos) name = name.substr(name.find_last_of('/') + 1);
    series.push_back({name, run_points(dirs[i], metric), kColors[i % 10]});
  }
  write_loss_plot(output, series, title.empty() ? metric : title);
  std::printf("wrote %s (%zu runs, %s)\n", output.c_str(), series.size(), metric.c_str());
  return 0;
}

}  // namespace zt::app
