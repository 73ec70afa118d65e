// smoke_main.cpp: a short fuzz run without libFuzzer, so ctest (gcc, and the ASan + UBSan pass of
// scripts/test_sanitizers.sh) exercises a target on every build. Linked with one fuzz_<name>.cpp,
// it feeds LLVMFuzzerTestOneInput each seed of the corpus folder, then deterministic mutations of
// them (bit flips, byte insertions and deletions, repeated and spliced chunks, digits and
// brackets, from a fixed-seed generator) until the time or the count runs out. A finding aborts,
// as under libFuzzer; exit 0 means none. Not a replacement for scripts/fuzz.sh (no coverage
// feedback): it only keeps the targets and the easy paths honest between real fuzz runs.
// usage: fuzz_smoke_<name> CORPUS_DIR [seconds (4)] [max mutations (3000)]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Rng {  // xorshift64*: the same mutations on every run
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
};

std::string mutate(const std::string& in, const std::vector<std::string>& seeds, Rng& r) {
  std::string s = in;
  static const char* tokens[] = {"{{", "}}", "{%", "%}", "[", "]", "(", ")", "{", "}", ".a", "|string", " not ",
                                 "9223372036854775807", "-1", "0", "//", "%", "**", "~", "\"", "\\", "\xff", "\0"};
  const int edits = 1 + int(r.below(4));
  for (int e = 0; e < edits; ++e) {
    const size_t at = r.below(s.size() + 1);
    switch (r.below(6)) {
      case 0:  // flip a bit
        if (!s.empty()) s[r.below(s.size())] ^= char(1u << r.below(8));
        break;
      case 1:  // insert a random byte
        s.insert(at, 1, char(r.below(256)));
        break;
      case 2:  // delete a run
        if (!s.empty()) s.erase(r.below(s.size()), 1 + r.below(16));
        break;
      case 3: {  // repeat a chunk (chains, nesting)
        if (s.empty()) break;
        const size_t b = r.below(s.size()), n = 1 + r.below(std::min<size_t>(32, s.size() - b));
        const std::string chunk = s.substr(b, n);
        for (size_t k = 0, times = 1 + r.below(64); k < times && s.size() < (1u << 20); ++k) s.insert(b, chunk);
        break;
      }
      case 4: {  // insert a token the formats care about
        const char* t = tokens[r.below(sizeof tokens / sizeof *tokens)];
        s.insert(at, t[0] ? std::string(t) : std::string(1, '\0'));
        break;
      }
      default: {  // splice in part of another seed
        const std::string& o = seeds[r.below(seeds.size())];
        if (o.empty()) break;
        const size_t b = r.below(o.size());
        s.insert(at, o.substr(b, 1 + r.below(o.size() - b)));
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [seconds] [max mutations]\n", argv[0]);
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 4;
  const long max_mutations = argc > 3 ? std::atol(argv[3]) : 3000;
  std::vector<std::string> seeds;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1], ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  if (seeds.empty()) seeds.push_back("");
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (const std::string& s : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  Rng rng;
  long n = 0;
  for (; n < max_mutations && elapsed() < seconds; ++n) {
    const std::string m = mutate(seeds[rng.below(seeds.size())], seeds, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  }
  std::printf("%s: %zu seeds + %ld mutations in %.1f s, no finding\n", argv[0], seeds.size(), n, elapsed());
  return 0;
}
