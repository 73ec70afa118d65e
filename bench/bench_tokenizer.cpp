// bench_tokenizer.cpp: ztrain's encoding speed on one thread (bench/bench_tokenizer.sh drives it).
// usage: zt_bench_tokenizer TOKENIZER TEXT_LIST REPEATS
// Reads the texts named in TEXT_LIST (one path a line) into memory, then REPEATS times: loads the
// tokenizer afresh (an empty piece cache, as Hugging Face's side starts) and times
// encode_with_special (added tokens cut out, as Hugging Face's encode does) over every text.
// Prints one line: bytes, tokens, and each repeat's seconds.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: zt_bench_tokenizer TOKENIZER TEXT_LIST REPEATS\n");
    return 2;
  }
  std::vector<std::string> texts;
  size_t bytes = 0;
  std::ifstream list(argv[2]);
  for (std::string path; std::getline(list, path);) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    texts.push_back(ss.str());
    bytes += texts.back().size();
  }
  std::printf("bytes %zu", bytes);
  size_t tokens = 0;
  for (int r = 0; r < std::atoi(argv[3]); ++r) {
    auto tok = zt::Tokenizer::load(argv[1]);
    tokens = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& t : texts) tokens += tok->encode_with_special(t).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(" seconds %.4f", s);
  }
  std::printf(" tokens %zu\n", tokens);
  return 0;
}
