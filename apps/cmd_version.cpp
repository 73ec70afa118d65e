// cmd_version.cpp: `ztrain version` / `ztrain --version`: what this binary is (version, commit,
// build type) and what it was built with (the CPU kernel levels compiled in, MPI, CUDA, oneDNN),
// for bug reports and for telling two builds apart.
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <string>

#include "commands.h"
#include "flags.h"
#include "kernels/isa.h"
#include "ztrain_version.h"

namespace zt::app {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace

int cmd_version(const Args& args) {
  FlagSet f("version");
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
#ifdef ZT_HAVE_CUDA
  const char* cuda = "on";
#else
  const char* cuda = "off";
#endif
  std::printf("ztrain %s\n", ZT_VERSION);
  std::printf("commit:   %s\n", ZT_GIT_COMMIT);
  std::printf("build:    %s\n", ZT_BUILD_TYPE);
  // isa_known(): the levels compiled into the kernels (Highway targets + avx512_bf16);
  // isa_available(): those this CPU can run.
  std::printf("cpu isa:  %s (compiled in); this CPU runs: %s\n", joined(kernels::isa_known()).c_str(),
              joined(kernels::isa_available()).c_str());
  std::printf("backends: MPI %s, CUDA %s, oneDNN %s\n", ZT_WITH_MPI ? "on" : "off", cuda, onednn_version().c_str());
  return 0;
}

}  // namespace zt::app
