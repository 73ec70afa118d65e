// fuzz_flags.cpp: libFuzzer target for the command-line flag parser (apps/flags.cpp). The
// input is an argv: arguments separated by NUL bytes, parsed by a FlagSet holding one flag of
// every kind (string, int, int64, double, bool) under ztrain's real flag names.
#include <string>
#include <vector>

#include "flags.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  for (std::string_view a : zt::fuzz::split(zt::fuzz::as_view(data, size), std::string_view("\0", 1), 256))
    args.emplace_back(a);
  std::string output_dir, model;
  int batch = 8, seed = 42;
  int64_t max_steps = -1;
  double lr = 5e-5, warmup = 0;
  bool no_shuffle = false, overwrite = false;
  zt::app::FlagSet f("train");
  f.add("output_dir", &output_dir, "where outputs go");
  f.add("model_name_or_path", &model, "HF model folder");
  f.add("per_device_train_batch_size", &batch, "sequences per micro-batch", zt::app::range::closed(1, 1 << 20));
  f.add("seed", &seed, "seed", zt::app::range::at_least(0));
  f.add("max_steps", &max_steps, "optimizer steps", zt::app::range::closed(1, 1e15).or_value(-1));
  f.add("learning_rate", &lr, "peak learning rate", zt::app::range::above(0));
  f.add("warmup_ratio", &warmup, "warmup fraction", zt::app::range::closed(0, 1));
  f.add("no_shuffle", &no_shuffle, "file order");
  f.add("overwrite_output_dir", &overwrite, "allow a non-empty --output_dir");
  zt::fuzz::expect_ok_or_error([&] { f.parse(args); });
  if (f.help().empty()) zt::fuzz::finding("empty help text");
  return 0;
}
