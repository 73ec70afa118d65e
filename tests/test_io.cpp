// test_io.cpp: file formats and user input: safetensors reading and writing (F32, BF16,
// F16, metadata, damaged files), config.json validation, token-file validation and the
// flag parser's messages. Every bad input must produce a zt::Error that names it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "checkpoint/safetensors.h"
#include "data/token_data.h"
#include "core/error.h"
#include "flags.h"
#include "models/config.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

std::string tmp(const std::string& name) { return (fs::temp_directory_path() / ("zt_io_" + name)).string(); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripF32AndBf16WithMetadata) {
  std::vector<float> a = {1.f, -2.5f, 3.25f, 1e-3f, 7.f, 0.f};
  std::vector<float> b = {0.1f, 0.2f};
  std::string p = tmp("rt.safetensors");
  safetensors_write(p, {{"a", {2, 3}, a.data()}, {"b.bias", {2}, b.data()}}, "F32", {{"format", "pt"}});
  {
    SafetensorsFile f(p);
    ASSERT_EQ(f.entries().size(), 2u);
    EXPECT_EQ(f.metadata().at("format"), "pt");
    const StEntry* e = f.find("a");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
    std::vector<float> back(6);
    f.read_f32(*e, back.data());
    EXPECT_EQ(back, a);
  }
  safetensors_write(p, {{"a", {2, 3}, a.data()}}, "BF16", {});
  SafetensorsFile f(p);
  std::vector<float> back(6);
  f.read_f32(*f.find("a"), back.data());
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(back[i], a[i], 4e-3 * std::abs(a[i]));
  EXPECT_EQ(f.metadata().size(), 0u);
}

TEST(Safetensors, ReadsF16) {
  // Header by hand: one F16 tensor [1.0, -2.0, 0.5].
  std::string header = R"({"x":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})";
  uint64_t n = header.size();
  std::string bytes(reinterpret_cast<char*>(&n), 8);
  bytes += header;
  uint16_t v[3] = {0x3c00, 0xc000, 0x3800};
  bytes.append(reinterpret_cast<char*>(v), 6);
  write_bytes(tmp("f16.safetensors"), bytes);
  SafetensorsFile f(tmp("f16.safetensors"));
  std::vector<float> out(3);
  f.read_f32(*f.find("x"), out.data());
  EXPECT_EQ(out, (std::vector<float>{1.f, -2.f, 0.5f}));
}

TEST(Safetensors, DamagedFilesAreNamedErrors) {
  EXPECT_NE(error_of([] { SafetensorsFile f(tmp("does_not_exist")); }).find("cannot open"), std::string::npos);
  write_bytes(tmp("short"), "abc");
  EXPECT_NE(error_of([] { SafetensorsFile f(tmp("short")); }).find("not a safetensors file"), std::string::npos);
  write_bytes(tmp("text"), "this is definitely not a safetensors file at all");
  EXPECT_NE(error_of([] { SafetensorsFile f(tmp("text")); }).find("safetensors"), std::string::npos);
  std::vector<float> a(100, 1.f);
  safetensors_write(tmp("trunc"), {{"a", {100}, a.data()}}, "F32", {});
  fs::resize_file(tmp("trunc"), fs::file_size(tmp("trunc")) - 10);
  EXPECT_NE(error_of([] { SafetensorsFile f(tmp("trunc")); }).find("truncated"), std::string::npos);
  std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  uint64_t n = header.size();
  write_bytes(tmp("badsize"), std::string(reinterpret_cast<char*>(&n), 8) + header + std::string(8, '\0'));
  EXPECT_NE(error_of([] { SafetensorsFile f(tmp("badsize")); }).find("need"), std::string::npos);
}

TEST(Config, MissingAndInvalidFieldsAreErrors) {
  nlohmann::json ok = {{"model_type", "gpt2"}, {"vocab_size", 50}, {"n_embd", 16}, {"n_layer", 1}, {"n_head", 2},
                       {"n_positions", 8},     {"unused_key", "kept"}};
  ModelConfig c = config_from_json(ok, "cfg");
  EXPECT_EQ(c.ffn, 64);
  EXPECT_EQ(config_to_json(c, "float32")["unused_key"], "kept");
  auto missing = ok;
  missing.erase("n_layer");
  EXPECT_NE(error_of([&] { config_from_json(missing, "cfg"); }).find("\"n_layer\""), std::string::npos);
  auto bad = ok;
  bad["n_head"] = "two";
  EXPECT_NE(error_of([&] { config_from_json(bad, "cfg"); }).find("n_head"), std::string::npos);
  auto indiv = ok;
  indiv["n_head"] = 3;
  EXPECT_NE(error_of([&] { config_from_json(indiv, "cfg"); }).find("divisible"), std::string::npos);
  EXPECT_NE(error_of([] { config_from_json({{"model_type", "bert"}}, "cfg"); }).find("not supported"),
            std::string::npos);
  EXPECT_NE(error_of([] { config_from_json({{"vocab_size", 3}}, "cfg"); }).find("model_type"), std::string::npos);
}

TEST(TokenFile, RejectsOutOfRangeIdsAndOddSizes) {
  std::vector<uint16_t> t = {1, 2, 3, 99, 4};
  write_bytes(tmp("tok.bin"), std::string(reinterpret_cast<char*>(t.data()), t.size() * 2));
  std::string e = error_of([] { TokenFile f(tmp("tok.bin"), 50); });
  EXPECT_NE(e.find("token id 99 at position 3"), std::string::npos) << e;
  write_bytes(tmp("odd.bin"), "abc");
  EXPECT_NE(error_of([] { TokenFile f(tmp("odd.bin"), 50); }).find("token file"), std::string::npos);
  TokenFile ok(tmp("tok.bin"), 100);
  WindowSampler s(ok, 2, false, 0);
  EXPECT_EQ(s.num_windows(), 2);
  std::vector<int32_t> in(4), tg(4);
  s.fill(in.data(), tg.data(), 1, 2);  // windows 1 then 0 (wraps)
  EXPECT_EQ(in, (std::vector<int32_t>{3, 99, 1, 2}));
  EXPECT_EQ(tg, (std::vector<int32_t>{99, 4, 2, 3}));
}

TEST(Flags, UnknownFlagSuggestsNearestAndValuesAreTyped) {
  double lr = 0;
  int bs = 0;
  bool flag = false;
  std::string s;
  app::FlagSet f("train");
  f.add("learning_rate", &lr, "");
  f.add("per_device_train_batch_size", &bs, "");
  f.add("no_shuffle", &flag, "");
  f.add("output_dir", &s, "");
  f.parse({"--learning_rate", "1e-3", "--per_device_train_batch_size=4", "--no_shuffle", "--output_dir", "x"});
  EXPECT_DOUBLE_EQ(lr, 1e-3);
  EXPECT_EQ(bs, 4);
  EXPECT_TRUE(flag);
  EXPECT_EQ(s, "x");
  EXPECT_NE(error_of([&] { f.parse({"--lerning_rate", "1"}); }).find("did you mean --learning_rate?"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.parse({"--learning_rate", "fast"}); }).find("expects a number"), std::string::npos);
  EXPECT_NE(error_of([&] { f.parse({"--per_device_train_batch_size", "2.5"}); }).find("expects an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.parse({"--output_dir"}); }).find("needs a value"), std::string::npos);
  EXPECT_NE(error_of([&] { f.parse({"stray"}); }).find("unexpected argument"), std::string::npos);
}

}  // namespace
}  // namespace zt
