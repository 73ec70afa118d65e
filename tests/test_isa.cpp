// test_isa.cpp: the kernel level choice (kernels/isa.h): the best level by default, every
// available level selectable (and reported), unknown or missing levels refused with a message
// that names the choices.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/isa.h"

namespace zt {
namespace {

TEST(Isa, BestByDefaultAndEveryAvailableLevelSelectable) {
  const auto avail = kernels::isa_available();
  ASSERT_FALSE(avail.empty());
  kernels::isa_select("auto");
  EXPECT_EQ(kernels::isa_current(), avail.front());
  for (const auto& name : avail) {
    kernels::isa_select(name);
    EXPECT_EQ(kernels::isa_current(), name);
    EXPECT_EQ(kernels::isa_bf16_dot(), name == "avx512_bf16");
  }
  kernels::isa_select("");
  EXPECT_EQ(kernels::isa_current(), avail.front());
}

TEST(Isa, UnknownAndMissingLevelsAreRefused) {
  try {
    kernels::isa_select("avx9000");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown ZT_ISA \"avx9000\"; choose auto or one of: "), std::string::npos)
        << e.what();
  }
  const auto avail = kernels::isa_available();
  for (const auto& name : kernels::isa_known()) {
    if (std::find(avail.begin(), avail.end(), name) != avail.end()) continue;
    try {
      kernels::isa_select(name);
      FAIL() << "no error for " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not have"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(kernels::isa_current(), avail.front());  // a refused choice changes nothing
}

TEST(Isa, MachineIsNamed) {
  EXPECT_FALSE(kernels::cpu_model_name().empty());
  EXPECT_FALSE(kernels::gemm_isa().empty());
}

}  // namespace
}  // namespace zt
