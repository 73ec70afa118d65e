// test_io.cpp: file formats and user input: safetensors reading and writing (F32, BF16,
// F16, metadata, damaged files), config.json validation, token-file validation and the
// flag parser's messages. Every bad input must produce a zt::Error that names it.
#include <gtest/gtest.h>

#include <chrono>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "checkpoint/checkpoint_meta.h"
#include "core/content_hash.h"
#include "core/hash.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/safetensors.h"
#include "data/token_data.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "flags.h"
#include "text/tokenizer.h"
#include "models/config.h"

namespace zt {
namespace {
namespace fs = std::filesystem;

std::string tmp(const std::string& name) { return (fs::temp_directory_path() / ("zt_io_" + name)).string(); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string error_text(const std::function<void()>& f) {
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
  safetensors_write(p, {{"a", {2, 3}, a.data()}, {"b.bias", {2}, b.data()}}, DType::f32, {{"format", "pt"}});
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
  safetensors_write(p, {{"a", {2, 3}, a.data()}}, DType::bf16, {});
  SafetensorsFile f(p);
  std::vector<float> back(6);
  f.read_f32(*f.find("a"), back.data());
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(back[i], a[i], 4e-3 * std::abs(a[i]));
  EXPECT_EQ(f.metadata().size(), 0u);
}

// The streaming hash equals the whole-buffer hash however the bytes are split.
TEST(FileWriter, StreamingHashEqualsWholeHash) {
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes.push_back(char(i * 131 + 7));
  for (size_t n : {size_t(0), size_t(5), size_t(32), size_t(33), size_t(999), size_t(1000)}) {
    for (size_t piece : {size_t(1), size_t(7), size_t(31), size_t(32), size_t(100), size_t(1000)}) {
      ContentHashStream h(3);
      for (size_t i = 0; i < n; i += piece) h.update(bytes.data() + i, std::min(piece, n - i));
      EXPECT_EQ(h.value(), content_hash(bytes.data(), n, 3)) << "n " << n << " pieces of " << piece;
    }
  }
  EXPECT_NE(content_hash(bytes.data(), 1000, 0), content_hash(bytes.data(), 1000, 1));
  // The tree checksum: XXH3 over the XXH3s of 512 KiB blocks, streamed in any pieces.
  std::string big(kChecksumBlock * 2 + 1000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char((i * 2654435761u) >> 11);
  for (size_t n : {size_t(0), size_t(1), kChecksumBlock, kChecksumBlock + 1, big.size()}) {
    std::vector<uint64_t> blocks;
    for (size_t b = 0; b < n; b += kChecksumBlock)
      blocks.push_back(content_hash(big.data() + b, std::min(kChecksumBlock, n - b)));
    EXPECT_EQ(tree_checksum(big.data(), n), tree_checksum_of_blocks(blocks)) << n;
    for (size_t piece : {size_t(1000), size_t(4096) * 33 + 5, kChecksumBlock}) {
      TreeChecksumStream t;
      for (size_t i = 0; i < n; i += piece) t.update(big.data() + i, std::min(piece, n - i));
      EXPECT_EQ(t.value(), tree_checksum(big.data(), n)) << n << " pieces of " << piece;
    }
  }
}

// The writer's bytes and digest, on the disk's file system (O_DIRECT there) and on /dev/shm
// (tmpfs: O_DIRECT refused or allowed, depending on the kernel), for sizes off the block size.
TEST(FileWriter, WritesExactBytesAndTheirDigest) {
  std::vector<std::string> dirs = {fs::temp_directory_path().string()};
  if (fs::is_directory("/dev/shm")) dirs.push_back("/dev/shm");
  for (const std::string& dir : dirs) {
    for (size_t n : {size_t(1), size_t(4096), size_t(4097), size_t(9u << 20) + 13}) {
      std::string data(n, '\0');
      for (size_t i = 0; i < n; ++i) data[i] = char((i * 2654435761u) >> 13);
      const std::string path = dir + "/zt_io_writer_" + std::to_string(::getpid());
      {
        SequentialFileWriter w(path, n);
        w.write(data.data(), n / 3);
        w.write(data.data() + n / 3, n - n / 3);
        const FileDigest d = w.finish();
        EXPECT_EQ(d.size, n);
        EXPECT_EQ(d.hash, tree_checksum(data.data(), n));
      }
      std::ifstream f(path, std::ios::binary);
      const std::string back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      EXPECT_TRUE(back == data) << dir << " size " << n << " read " << back.size();
      EXPECT_EQ(checkpoint_file_digest(path), std::make_pair(tree_checksum(data.data(), n), uint64_t(n)));
      EXPECT_EQ(checkpoint_file_digest(path, ChecksumKind::hash64),
                std::make_pair(hash64(data.data(), n), uint64_t(n)));
      fs::remove(path);
    }
  }
  // Destroyed before finish: nothing is left behind.
  const std::string path = tmp("writer_abandoned");
  {
    SequentialFileWriter w(path, 10);
    w.write("abc", 3);
  }
  EXPECT_FALSE(fs::exists(path));
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
  EXPECT_NE(error_text([] { SafetensorsFile f(tmp("does_not_exist")); }).find("cannot open"), std::string::npos);
  write_bytes(tmp("short"), "abc");
  EXPECT_NE(error_text([] { SafetensorsFile f(tmp("short")); }).find("not a safetensors file"), std::string::npos);
  write_bytes(tmp("text"), "this is definitely not a safetensors file at all");
  EXPECT_NE(error_text([] { SafetensorsFile f(tmp("text")); }).find("safetensors"), std::string::npos);
  std::vector<float> a(100, 1.f);
  safetensors_write(tmp("trunc"), {{"a", {100}, a.data()}}, DType::f32, {});
  fs::resize_file(tmp("trunc"), fs::file_size(tmp("trunc")) - 10);
  EXPECT_NE(error_text([] { SafetensorsFile f(tmp("trunc")); }).find("truncated"), std::string::npos);
  std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  uint64_t n = header.size();
  write_bytes(tmp("badsize"), std::string(reinterpret_cast<char*>(&n), 8) + header + std::string(8, '\0'));
  EXPECT_NE(error_text([] { SafetensorsFile f(tmp("badsize")); }).find("need"), std::string::npos);
}

TEST(Config, MissingAndInvalidFieldsAreErrors) {
  nlohmann::json ok = {{"model_type", "gpt2"}, {"vocab_size", 50}, {"n_embd", 16},        {"n_layer", 1},
                       {"n_head", 2},          {"n_positions", 8}, {"unused_key", "kept"}};
  ModelConfig c = config_from_json(ok, "cfg");
  EXPECT_EQ(c.ffn, 64);
  EXPECT_EQ(config_to_json(c, "float32")["unused_key"], "kept");
  auto missing = ok;
  missing.erase("n_layer");
  EXPECT_NE(error_text([&] { config_from_json(missing, "cfg"); }).find("\"n_layer\""), std::string::npos);
  auto bad = ok;
  bad["n_head"] = "two";
  EXPECT_NE(error_text([&] { config_from_json(bad, "cfg"); }).find("n_head"), std::string::npos);
  auto indiv = ok;
  indiv["n_head"] = 3;
  EXPECT_NE(error_text([&] { config_from_json(indiv, "cfg"); }).find("divisible"), std::string::npos);
  EXPECT_NE(error_text([] {
              config_from_json({{"model_type", "bert"}}, "cfg");
            }).find("not supported"),
            std::string::npos);
  EXPECT_NE(error_text([] { config_from_json({{"vocab_size", 3}}, "cfg"); }).find("model_type"), std::string::npos);
}

TEST(TokenFile, RejectsOutOfRangeIdsAndOddSizes) {
  std::vector<uint16_t> t = {1, 2, 3, 99, 4};
  write_bytes(tmp("tok.bin"), std::string(reinterpret_cast<char*>(t.data()), t.size() * 2));
  std::string e = error_text([] { TokenFile f(tmp("tok.bin"), 50); });
  EXPECT_NE(e.find("token id 99 at position 3"), std::string::npos) << e;
  write_bytes(tmp("odd.bin"), "abc");
  EXPECT_NE(error_text([] { TokenFile f(tmp("odd.bin"), 50); }).find("token file"), std::string::npos);
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
  f.add("learning_rate", &lr, "", app::range::above(0));
  f.add("per_device_train_batch_size", &bs, "", app::range::closed(1, 1 << 20));
  f.add("no_shuffle", &flag, "");
  f.add("output_dir", &s, "");
  f.parse({"--learning_rate", "1e-3", "--per_device_train_batch_size=4", "--no_shuffle", "--output_dir", "x"});
  EXPECT_DOUBLE_EQ(lr, 1e-3);
  EXPECT_EQ(bs, 4);
  EXPECT_TRUE(flag);
  EXPECT_EQ(s, "x");
  EXPECT_NE(error_text([&] {
              f.parse({"--lerning_rate", "1"});
            }).find("did you mean --learning_rate?"),
            std::string::npos);
  EXPECT_NE(error_text([&] { f.parse({"--learning_rate", "fast"}); }).find("expects a number"), std::string::npos);
  EXPECT_NE(error_text([&] {
              f.parse({"--per_device_train_batch_size", "2.5"});
            }).find("expects an integer"),
            std::string::npos);
  // Integers in DeepSpeed's notation (5e8) are accepted when exact.
  int64_t bucket = 0;
  f.add("reduce_bucket_size", &bucket, "", app::range::closed(1, 1e15));
  f.parse({"--reduce_bucket_size", "5e8", "--per_device_train_batch_size", "1.6e1"});
  EXPECT_EQ(bucket, 500000000);
  EXPECT_EQ(bs, 16);
  for (const char* bad : {"2.5e0", "1e30", "5e", "1e10"}) {
    const char* flag_name = std::string(bad) == "1e10" ? "--per_device_train_batch_size" : "--reduce_bucket_size";
    EXPECT_NE(error_text([&] { f.parse({flag_name, bad}); }).find("expects an integer"), std::string::npos) << bad;
  }
  EXPECT_NE(error_text([&] { f.parse({"--output_dir"}); }).find("needs a value"), std::string::npos);
  EXPECT_NE(error_text([&] { f.parse({"stray"}); }).find("unexpected argument"), std::string::npos);
}

// Every numeric flag has a range, checked at parse time: out-of-range, NaN, infinite, huge and
// non-numbers are one message naming the flag, the range and the value; special values pass.
TEST(Flags, RangesAreCheckedWhereFlagsAreParsed) {
  int batch = 8;
  int64_t steps = -1;
  double beta = 0.9, top_p = 1;
  app::FlagSet f("train");
  f.add("per_device_train_batch_size", &batch, "", app::range::closed(1, 1 << 20));
  f.add("max_steps", &steps, "", app::range::closed(1, 1e15).or_value(-1));
  f.add("adam_beta1", &beta, "", app::range::below(0, 1));
  f.add("top_p", &top_p, "", app::range::above(0, 1));
  f.parse({"--max_steps", "-1", "--adam_beta1", "0", "--top_p", "1", "--per_device_train_batch_size", "1048576"});
  EXPECT_EQ(steps, -1);
  EXPECT_EQ(batch, 1 << 20);
  EXPECT_EQ(error_text([&] {
              f.parse({"--adam_beta1", "1.5"});
            }),
            "ztrain train: --adam_beta1 expects a number in [0, 1), got \"1.5\"");
  EXPECT_EQ(error_text([&] {
              f.parse({"--max_steps", "0"});
            }),
            "ztrain train: --max_steps expects -1 or an integer in [1, 1e15], got \"0\"");
  for (const char* bad : {"0", "-0.5", "2", "nan", "inf", "-inf", "1e400", "abc", ""})
    EXPECT_NE(error_text([&] {
                f.parse({"--top_p", bad});
              }).find("--top_p expects a number in (0, 1], got"),
              std::string::npos)
        << bad;
  for (const char* bad : {"0", "-1", "1048577", "1e18", "9223372036854775808", "nan", "2.5", "x"})
    EXPECT_NE(error_text([&] {
                f.parse({"--per_device_train_batch_size", bad});
              }).find("--per_device_train_batch_size expects an integer in [1, 1048576], got"),
              std::string::npos)
        << bad;
  EXPECT_EQ(top_p, 1);  // a rejected value leaves the flag alone
  EXPECT_NE(f.help().find("[-1 or an integer in [1, 1e15]]"), std::string::npos) << f.help();
  // An int flag's open-ended range stops at int's limit, and says so.
  int k = 0;
  f.add("top_k", &k, "", app::range::at_least(0));
  EXPECT_NE(error_text([&] {
              f.parse({"--top_k", "3000000000"});
            }).find("an integer in [0, 2147483647]"),
            std::string::npos);
}

// ---- Regression cases from fuzzing (fuzz/, docs/testing.md) and the sanitizer run ----
// Each input once escaped as a foreign exception, undefined behaviour, a leak or a multi-line
// message; now it must be a zt::Error whose message is one line containing `part`.

std::string one_line_error(const std::function<void()>& f, const std::string& part) {
  std::string e = error_text(f);
  EXPECT_NE(e.find(part), std::string::npos) << "message: " << e;
  EXPECT_EQ(e.find_first_of("\r\n"), std::string::npos) << "not one line: " << e;
  return e;
}

std::string st_bytes(const std::string& header, const std::string& data = "") {
  uint64_t n = header.size();
  return std::string(reinterpret_cast<char*>(&n), 8) + header + data;
}

int lowest_free_fd() {
  int fd = ::dup(0);
  ::close(fd);
  return fd;
}

TEST(FuzzRegression, FlagsEscapeControlCharacters) {
  std::string s;
  double lr = 0;
  app::FlagSet f("train");
  f.add("output_dir", &s, "");
  f.add("learning_rate", &lr, "", app::range::above(0));
  one_line_error([&] { f.parse({"--output_dddd\nddir", "x"}); }, "unknown flag --output_dddd\\nddir");
  one_line_error([&] { f.parse({"--learning_rate", "1\r\n2"}); }, "expects a number > 0, got \"1\\r\\n2\"");
  one_line_error([&] { f.parse({"stray\x01"}); }, "unexpected argument \"stray\\x01\"");
}

TEST(FuzzRegression, Gpt2MergesWithInvalidUtf8OrCarriageReturns) {
  fs::path dir = fs::temp_directory_path() / ("zt_io_gpt2_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_bytes((dir / "encoder.json").string(), R"({"a": 0, "b": 1, "ab": 2})");
  // json::dump threw type_error 316 on the invalid UTF-8 of this merge's text.
  write_bytes((dir / "vocab.bpe").string(), "a \xA0\n");
  one_line_error([&] { Tokenizer::load(dir.string()); }, "vocab.bpe:1: merge \"a \xA0\"");
  write_bytes((dir / "vocab.bpe").string(), "a \r\xFF\xFF\xFF\rb\n");
  one_line_error([&] { Tokenizer::load(dir.string()); }, "expected two symbols separated by a space, got \"a \\r");
  // A number too large for a double is json out_of_range 406, which escaped as a foreign exception.
  write_bytes((dir / "encoder.json").string(), R"({"a": 333333333333.333333e33333333333333333})");
  one_line_error([&] { Tokenizer::load(dir.string()); }, "encoder.json: not valid JSON");
  write_bytes((dir / "tokenizer.json").string(), "[1e99999]");
  one_line_error([&] { Tokenizer::load((dir / "tokenizer.json").string()); }, "tokenizer.json: not valid JSON");
  fs::remove_all(dir);
}

TEST(FuzzRegression, SafetensorsShapeOverflowAndNoLeaks) {
  // [2^32, 2^32] F32: the element count overflowed int64 (UB) and wrapped to a size of 0.
  write_bytes(tmp("ovf"), st_bytes(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"));
  one_line_error([] { SafetensorsFile f(tmp("ovf")); }, "need more than 2^64");
  write_bytes(tmp("neg"),
              st_bytes(R"({"x":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", "abcd"));
  one_line_error([] { SafetensorsFile f(tmp("neg")); }, "not a list of non-negative integers");
  // A zero dimension makes an empty tensor whatever the others are (no overflow on the way).
  write_bytes(tmp("zero"),
              st_bytes(R"({"x":{"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}})"));
  {
    SafetensorsFile f(tmp("zero"));
    EXPECT_EQ(f.find("x")->numel(), 0);
  }
  write_bytes(tmp("nl"), st_bytes("{\"a\\nb\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd"));
  one_line_error([] { SafetensorsFile f(tmp("nl")); }, "tensor \"a\\nb\" has unknown dtype \"F99\"");
  // A rejected file used to leak its descriptor and mapping (the constructor threw past them).
  int before = lowest_free_fd();
  for (int i = 0; i < 50; ++i) error_text([] { SafetensorsFile f(tmp("ovf")); });
  EXPECT_EQ(lowest_free_fd(), before);
}

// Peak resident memory (VmHWM) in bytes after resetting it (writing 5 to clear_refs).
int64_t reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Issue 21 item 9: headers were accepted up to 1 GiB and a 150 MB one cost 5.8 GB to parse (a
// JSON document of ~40 bytes per header byte). Now: Hugging Face's 100 MB cap, a parse that
// builds the entries directly, and no nesting deeper than the format has.
TEST(Safetensors, HeaderIsCappedAndParsedInBoundedMemory) {
  {  // 100,000,001 bytes of header in a sparse file: refused before anything is read
    const std::string p = tmp("cap.safetensors");
    const uint64_t n = kStMaxHeaderBytes + 1;
    write_bytes(p, std::string(reinterpret_cast<const char*>(&n), 8));
    ASSERT_EQ(::truncate(p.c_str(), off_t(8 + n + 16)), 0);
    one_line_error([&] { SafetensorsFile f(p); }, "header is 100000001 bytes, over the limit of 100000000 (100 MB");
    fs::remove(p);
  }
  // About 27 MB of header: 400,000 empty tensors and metadata.
  std::string h = "{\"__metadata__\":{\"format\":\"pt\",\"n\":[1,2,{\"x\":3}]}";
  const int n = 400000;
  for (int i = 0; i < n; ++i)
    h += ",\"layer." + std::to_string(i) + ".w\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]}";
  h += "}";
  const std::string p = tmp("big_header.safetensors");
  write_bytes(p, st_bytes(h));
  const int64_t before = reset_peak_rss();
  const auto t0 = std::chrono::steady_clock::now();
  {
    SafetensorsFile f(p);
    EXPECT_EQ(f.entries().size(), size_t(n));
    EXPECT_EQ(f.metadata().at("format"), "pt");
    EXPECT_TRUE(f.find("layer.7.w") && f.find("layer.7.w")->shape == (std::vector<int64_t>{0, 4}));
    const int64_t grew = reset_peak_rss() - before;
    // The mapped header's pages count too (h.size()); the entries about 150 bytes each.
    EXPECT_LT(grew, int64_t(h.size()) + int64_t(n) * 400) << "header of " << h.size() << " bytes";
    std::printf("[          ] %zu-byte header: peak resident +%lld bytes (%.1fx), %.2f s\n", h.size(),
                (long long)grew, double(grew) / double(h.size()),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  fs::remove(p);
  // Nesting beyond the format's three levels, anywhere: one error, no deep recursion.
  const std::string deep(100000, '[');
  for (const std::string& bad : {"{\"a\":{\"x\":" + deep + "}}", "{\"__metadata__\":{\"k\":" + deep + "}}"}) {
    write_bytes(tmp("deep"), st_bytes(bad));
    one_line_error([] { SafetensorsFile f(tmp("deep")); }, "nests deeper than 64 levels");
  }
  write_bytes(tmp("deep"), st_bytes(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", "abcd"));
  one_line_error([] { SafetensorsFile f(tmp("deep")); }, "has a shape that is not a list of non-negative integers");
  write_bytes(tmp("deep"), st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}})", "abcd"));
  one_line_error([] { SafetensorsFile f(tmp("deep")); }, "malformed header entry for tensor \"a\"");
  write_bytes(tmp("deep"), st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd"));
  one_line_error([] { SafetensorsFile f(tmp("deep")); }, "tensor \"a\" appears twice");
  write_bytes(tmp("deep"), st_bytes(R"({"__metadata__":5})"));
  one_line_error([] { SafetensorsFile f(tmp("deep")); }, "__metadata__ must be an object of strings");
  write_bytes(tmp("deep"), st_bytes(R"([1])"));
  one_line_error([] { SafetensorsFile f(tmp("deep")); }, "header is not a JSON object");
  write_bytes(tmp("deep"), st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)", "abcd"));
  one_line_error([] { SafetensorsFile f(tmp("deep")); }, "not valid JSON");
  fs::remove(tmp("deep"));
}

TEST(FuzzRegression, ConfigValuesOutOfRange) {
  nlohmann::json ok = {{"model_type", "llama"},  {"vocab_size", 100},        {"hidden_size", 64},
                       {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"intermediate_size", 128}};
  config_from_json(ok, "cfg");
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = ok;
    j[key] = v;
    return [j] { config_from_json(j, "cfg"); };
  };
  // 4294967297 was read as int 1.
  one_line_error(with("vocab_size", 4294967297ll), "\"vocab_size\" must be a positive integer up to");
  // (4 + 2 * 4) * head_dim overflowed int in qkv_dim().
  one_line_error(with("head_dim", 16777216), "implausibly large");
  one_line_error(with("num_attention_heads", 128), "head size is 0");
  one_line_error(with("rms_norm_eps", -1e-6), "\"rms_norm_eps\" must be a positive number");
  one_line_error(with("rope_theta", 1e300), "\"rope_theta\" must be a positive number");
  one_line_error(with("model_type", "lla\nma"), "model_type \"lla\\nma\" is not supported");
}

TEST(FuzzRegression, CheckpointMetadata) {
  fs::path out = fs::temp_directory_path() / ("zt_io_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::path ck = out / "checkpoint-7";
  fs::create_directories(ck);
  write_bytes((ck / "config.json").string(), "{}");
  // std::stoll threw std::out_of_range on this folder name; it is simply not a checkpoint.
  fs::create_directories(out / "checkpoint-99999999999999999999");
  auto sums = [&](const std::string& text) { write_bytes((ck / "checksums.json").string(), text); };
  sums(R"({"save_id": "1", "files": {"config.json": {"hash64": 1, "bytes": "2"}}})");  // get<uint64_t> threw
  one_line_error([&] { checkpoint_verify(ck.string()); },
                 "needs unsigned integers \"xxh3_tree\" (or \"hash64\") and \"bytes\"");
  sums(R"({"save_id": "1", "files": {"../checkpoint-7/config.json": {"hash64": 1, "bytes": 2}}})");
  one_line_error([&] { checkpoint_verify(ck.string()); }, "is not a file name");
  // An older checkpoint's hash64 checksums verify as well as XXH3 ones; a mismatch is named.
  auto [h, size] = checkpoint_file_digest((ck / "config.json").string(), ChecksumKind::hash64);
  sums(nlohmann::json{{"save_id", "1"}, {"files", {{"config.json", {{"hash64", h}, {"bytes", size}}}}}}.dump());
  EXPECT_EQ(checkpoint_find_latest(out.string()), ck.string());
  sums(nlohmann::json{{"save_id", "1"}, {"files", {{"config.json", {{"xxh3_tree", h}, {"bytes", size}}}}}}.dump());
  one_line_error([&] { checkpoint_verify(ck.string()); }, "\"config.json\" fails its checksum");
  const uint64_t x = checkpoint_file_digest((ck / "config.json").string()).first;
  sums(nlohmann::json{{"save_id", "1"}, {"files", {{"config.json", {{"xxh3_tree", x}, {"bytes", size}}}}}}.dump());
  EXPECT_EQ(checkpoint_find_latest(out.string()), ck.string());
  checkpoint_prune(out.string(), 1);

  // trainer_state.json: json out_of_range / type_error in the trainer, now named errors.
  std::string st = (ck / "trainer_state.json").string();
  nlohmann::json good = {
      {"global_step", 20},
      {"log_history", {{{"loss", 5.25}, {"step", 10}}, {{"eval_loss", 5.0}, {"step", 20}}}},
      {"ztrain",
       {{"loss_sum", 104.5}, {"seed", 42}, {"shuffle", true}, {"sequence_length", 16}, {"sequences_per_step", 2}}}};
  write_bytes(st, good.dump());
  EXPECT_EQ(checkpoint_read_trainer_state(st)["global_step"], 20);
  write_bytes(st, R"({"global_step": 1})");
  one_line_error([&] { checkpoint_read_trainer_state(st); }, "\"log_history\" is missing or not an array");
  auto bad = good;
  bad["ztrain"].erase("shuffle");
  write_bytes(st, bad.dump());
  one_line_error([&] { checkpoint_read_trainer_state(st); }, "\"ztrain.shuffle\" is missing or not true or false");
  bad = good;
  bad["log_history"][0]["loss"] = nullptr;  // the loss plot's get<double>() threw
  write_bytes(st, bad.dump());
  one_line_error([&] { checkpoint_read_trainer_state(st); }, "has a \"loss\" that is not a number");
  write_bytes(st, "{\"global_step\": ");
  one_line_error([&] { checkpoint_read_trainer_state(st); }, "not valid JSON");
  fs::remove_all(out);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// core/tensor.h: the one DType's names round-trip, views check their dtype, sub-views land
// where the offset says, the arena carves views 64-byte aligned, fp16 decodes exactly.
TEST(Tensor, DTypeNamesViewsAndCarver) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8, DType::u8, DType::i32, DType::i64}) {
    DType back{};
    ASSERT_TRUE(dtype_from_st_name(dtype_st_name(t), &back)) << dtype_name(t);
    EXPECT_EQ(back, t);
  }
  DType none{};
  EXPECT_FALSE(dtype_from_st_name("U16", &none));
  float buf[24] = {};
  const TensorView v = TensorView::of(buf, {4, 6});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.bytes(), 96u);
  EXPECT_EQ(v.strides[0], 6);
  EXPECT_EQ(v.strides[1], 1);
  const TensorView row2 = v.sub(12, {2, 6});
  EXPECT_EQ(row2.as<float>(), buf + 12);
  EXPECT_EQ(row2.shape.str(), "(2, 6)");
  EXPECT_THROW(v.as<int32_t>(), Error);    // a view of floats is not ints
  EXPECT_THROW(v.sub(20, {1, 6}), Error);  // past the end
  Carver c;
  const TensorView a = c.take(DType::bf16, {3});  // 6 bytes, rounded to 64
  const TensorView b = c.take(DType::f32, {0});   // empty: no memory, no pointer
  EXPECT_TRUE(a.empty() && b.empty());
  EXPECT_EQ(c.used(), 64u);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);  // halfway: rounds to even
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// Ranks and resumes compare the resolved model config: what builds the model counts (defaults
// made explicit), bookkeeping keys of the file do not.
TEST(Config, ResolvedJsonComparesWhatBuildsTheModel) {
  nlohmann::json a = {{"model_type", "llama"},   {"vocab_size", 64},       {"hidden_size", 32},
                      {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  nlohmann::json b = a;
  b["transformers_version"] = "4.46.0";
  b["num_key_value_heads"] = 4;  // the default, written out
  EXPECT_EQ(config_first_difference(config_resolved_json(config_from_json(a, "a")),
                                    config_resolved_json(config_from_json(b, "b"))),
            "");
  b["rms_norm_eps"] = 1e-5;
  EXPECT_EQ(config_first_difference(config_resolved_json(config_from_json(a, "a")),
                                    config_resolved_json(config_from_json(b, "b"))),
            "rms_norm_eps");
}

}  // namespace
}  // namespace zt
