// deepspeed_offload.cpp: see deepspeed_offload.h. Key names and defaults are DeepSpeed 0.19's
// (runtime/zero/offload_config.py, runtime/swap_tensor/aio_config.py).
#include "deepspeed_offload.h"

#include "core/edit_distance.h"
#include "core/error.h"
#include "deepspeed_values.h"

namespace zt::ds_offload {

using namespace ds_values;
using json = nlohmann::json;

namespace {

[[noreturn]] void unknown(const std::string& key, std::initializer_list<const char*> known) {
  const std::string prefix = key.substr(0, key.rfind('.') + 1), name = key.substr(prefix.size());
  std::string best, list;
  for (const char* k : known) {
    if (best.empty() || edit_distance(name, k) < edit_distance(name, best)) best = k;
    list += (list.empty() ? "" : ", ") + std::string(k);
  }
  throw Error(str_cat("DeepSpeed config key ", key, " is not supported by ztrain's offload (did you mean ", prefix,
                      best, "?); its keys: ", list));
}

}  // namespace

void read_offload_keys(TrainArgs& a, const std::string& section, const json& v, bool param,
                       std::vector<std::string>* mismatches) {
  for (auto& [k, val] : v.items()) {
    const std::string key = section + "." + k;
    if (k == "device") {
      continue;  // deepspeed_config.cpp
    } else if (k == "nvme_path") {
      if (val.is_null()) continue;
      const std::string path = read_string(key, val);
      // Both sections may name a folder: one file holds both, so they must agree.
      if (!a.nvme_path.empty() && a.nvme_path != path) {
        if (a.explicit_flags.count("nvme_path"))
          mismatches->push_back(str_cat("- ds ", key, "=", show_json(val), " vs hf nvme_path=", a.nvme_path));
        else
          throw Error(str_cat("DeepSpeed config: offload_optimizer.nvme_path and offload_param.nvme_path differ (",
                              quote(a.nvme_path), " vs ", quote(path),
                              "); ztrain keeps both in one file: give one folder"));
        continue;
      }
      a.nvme_path = path;
    } else if (k == "buffer_count") {
      read(key, val, false, param ? a.offload_param_buffer_count : a.offload_buffer_count, 1, 1 << 20);
    } else if (k == "pin_memory" || k == "fast_init" || k == "pipeline_read" || k == "pipeline_write" ||
               k == "pipeline") {
      // pin_memory page-locks host buffers for GPU copies (none here); fast_init and the
      // pipeline switches choose DeepSpeed's swapping schedule: ztrain always pipelines.
      bool b = false;
      read(key, val, false, b, 0, 0);
    } else if (param && k == "buffer_size") {
      read(key, val, false, a.offload_param_buffer_size, 1, INT64_MAX);
    } else if (param && k == "max_in_cpu") {
      read(key, val, false, a.offload_param_max_in_cpu, 1, INT64_MAX);
    } else if (!param && k == "ratio") {
      double r = 1;
      read(key, val, false, r, 0, 1);
      ZT_CHECK(r == 1.0, "DeepSpeed config key ", key, "=", show(r),
               " (partial offload: a fraction of the optimizer on the GPU) is not supported; use 1 or drop it");
    } else if (param) {
      unknown(key, {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"});
    } else {
      unknown(key, {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write", "fast_init",
                    "ratio"});
    }
  }
}

void read_aio(TrainArgs& a, const json& v) {
  require_object("aio", v);
  for (auto& [k, val] : v.items()) {
    const std::string key = "aio." + k;
    if (k == "block_size") {
      read(key, val, false, a.aio.block_size, 4096, int64_t(1) << 30);
    } else if (k == "queue_depth") {
      read(key, val, false, a.aio.queue_depth, 1, 4096);
    } else if (k == "thread_count" || k == "intra_op_parallelism") {
      read(key, val, false, a.aio.thread_count, 1, 1024);
    } else if (k == "single_submit") {
      read(key, val, false, a.aio.single_submit, 0, 0);
    } else if (k == "overlap_events") {
      read(key, val, false, a.aio.overlap_events, 0, 0);
    } else if (k == "use_gds") {
      bool gds = false;
      read(key, val, false, gds, 0, 0);
      ZT_CHECK(!gds,
               "DeepSpeed config key aio.use_gds=true (GPUDirect Storage) is not supported: ztrain reads the "
               "offload file into host memory with io_uring; set it to false");
    } else {
      unknown(key, {"block_size", "queue_depth", "thread_count", "single_submit", "overlap_events", "use_gds"});
    }
  }
  check_aio_options(a.aio);
}

}  // namespace zt::ds_offload
