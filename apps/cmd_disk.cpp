// cmd_disk.cpp: `ztrain bench-disk`, the disk's raw bandwidth through offload's own I/O path
// (core/async_file.h: io_uring, O_DIRECT, aio.block_size pieces, aio.queue_depth in flight), so
// docs/offload.md can set the bandwidth offload achieves against what the disk gives at the same
// queue depth and block size.
#include <cstdio>

#include "commands.h"
#include "core/async_file.h"
#include "core/error.h"
#include "core/memory.h"
#include "flags.h"

namespace zt::app {

int cmd_bench_disk(const Args& args) {
  std::string path = "/tmp";
  int64_t size = int64_t(2) << 30, request = int64_t(64) << 20;
  AioOptions aio;
  FlagSet f("bench-disk");
  f.add("path", &path, "the folder to write the test file in (/tmp); use offload's --nvme_path");
  f.add("size", &size, "bytes written then read (2147483648 = 2 GiB)", range::at_least(4096));
  f.add("request", &request,
        "bytes per request handed to the I/O thread, as offload's windows hand it (67108864 = 64 MiB)",
        range::at_least(4096));
  f.add("aio_block_size", &aio.block_size, "bytes per disk request (DeepSpeed's aio.block_size) (1048576)",
        range::at_least(4096));
  f.add("aio_queue_depth", &aio.queue_depth, "disk requests in flight (aio.queue_depth) (8)", range::at_least(1));
  f.add("aio_single_submit", &aio.single_submit, "one system call per request (aio.single_submit) (false)");
  f.add("aio_overlap_events", &aio.overlap_events, "refill as each request completes (aio.overlap_events) (true)");
  if (wants_help(args, f.help() + "\nWrites --size bytes to a scratch file under --path (removed at exit), then "
                                  "reads them back, with O_DIRECT where the file system allows it.\n"))
    return 0;
  f.parse(args);
  ZT_CHECK(request % AsyncFile::kAlign == 0, "--request ", request, " must be a multiple of 4096 bytes");
  const DiskBench r = bench_disk(path, size, request, aio);
  std::printf(
      "bench-disk %s: %s in %s requests, block_size %lld, queue_depth %d%s: write %.3f GB/s, read %.3f GB/s, "
      "reads and writes together %.3f GB/s\n",
      path.c_str(), format_bytes(double(size)).c_str(), format_bytes(double(request)).c_str(),
      (long long)aio.block_size, aio.queue_depth, r.direct ? ", O_DIRECT" : ", page cache (no O_DIRECT)", r.write_gbps,
      r.read_gbps, r.mixed_gbps);
  return 0;
}

}  // namespace zt::app
