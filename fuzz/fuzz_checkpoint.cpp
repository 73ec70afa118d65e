// fuzz_checkpoint.cpp: libFuzzer target for checkpoint metadata (src/checkpoint/checkpoint_meta.cpp,
// run_folder.cpp).
// Input byte 0 picks what the rest is (mod 3):
//   0: checksums.json of a checkpoint folder holding config.json, model.safetensors and
//      trainer_state.json (fixed bytes; fuzz/corpus has a seed with their true hashes), verified;
//   1: trainer_state.json, read, then used the way the trainer uses it on resume
//      (src/train/trainer.cpp, src/train/train_log.cpp: restore and the loss plot);
//   2: folder names, one per line, created in an output folder whose newest intact checkpoint
//      is then looked up and whose older ones are pruned.
#include <filesystem>

#include "checkpoint/checkpoint_meta.h"
#include "checkpoint/run_folder.h"
#include "fuzz_util.h"

namespace fs = std::filesystem;

namespace {

// The files the mode-0 checksums.json describes. make_seeds.py writes the same bytes.
const fs::path& checkpoint_dir() {
  static const fs::path d = [] {
    fs::path p = zt::fuzz::scratch_dir() / "ckpt" / "checkpoint-7";
    fs::create_directories(p);
    zt::fuzz::write_file(p / "config.json", "{\"model_type\": \"gpt2\"}\n");
    std::string st;
    for (int i = 0; i < 100; ++i) st += char(i);
    zt::fuzz::write_file(p / "model.safetensors", st);
    zt::fuzz::write_file(p / "trainer_state.json", "{\"global_step\": 7}\n");
    return p;
  }();
  return d;
}

// What the trainer reads from a resumed trainer_state.json.
void use_like_the_trainer(const nlohmann::json& s) {
  volatile int64_t step = s.at("global_step").get<int64_t>();
  const auto& zs = s.at("ztrain");
  volatile int64_t seqs = zs.at("sequences_per_step").get<int64_t>();
  volatile int T = zs.at("sequence_length").get<int>();
  volatile int64_t seed = zs.at("seed").get<int64_t>();
  volatile bool shuffle = zs.at("shuffle").get<bool>();
  volatile double loss_sum = zs.at("loss_sum").get<double>();
  (void)step, (void)seqs, (void)T, (void)seed, (void)shuffle, (void)loss_sum;
  nlohmann::json history = s.at("log_history");
  if (!history.empty() && history.back().contains("train_runtime")) history.erase(history.size() - 1);
  const nlohmann::json& h = history;
  for (auto& e : h) {
    if (e.contains("loss")) (void)(e["step"].get<double>() + e["loss"].get<double>());
    if (e.contains("eval_loss")) (void)(e["step"].get<double>() + e["eval_loss"].get<double>());
  }
}

bool plain_name(std::string_view n) {
  return !n.empty() && n.size() < 200 && n != "." && n != ".." && n.find('/') == std::string_view::npos &&
         n.find('\0') == std::string_view::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  zt::fuzz::LeakCheck leaks(/*maps=*/true);
  std::string_view rest = zt::fuzz::as_view(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      zt::fuzz::write_file(checkpoint_dir() / "checksums.json", rest);
      zt::fuzz::expect_ok_or_error([&] { zt::checkpoint_verify(checkpoint_dir().string()); });
      break;
    }
    case 1: {
      zt::fuzz::MemFile f(rest);
      zt::fuzz::expect_ok_or_error([&] { use_like_the_trainer(zt::checkpoint_read_trainer_state(f.path())); });
      break;
    }
    default: {
      static const fs::path out = zt::fuzz::scratch_dir() / "ckpt_out";
      fs::remove_all(out);
      fs::create_directories(out);
      for (std::string_view name : zt::fuzz::split(rest, "\n", 8))
        if (plain_name(name)) fs::create_directories(out / name);
      zt::fuzz::expect_ok_or_error([&] {
        std::string latest = zt::checkpoint_find_latest(out.string());
        if (!latest.empty()) zt::fuzz::finding("found an intact checkpoint in a folder of empty ones");
        zt::checkpoint_prune(out.string(), 1);
      });
      break;
    }
  }
  return 0;
}
