// flags.h: a small typed command-line parser with HF-style "--name value" and
// "--name=value" flags. Unknown flags are rejected with the nearest known name;
// malformed values are rejected naming the flag and the expected type.
// Every numeric flag is declared with its valid range (Range below), checked here, in one
// place, when the flag is given: a value outside it (0, -1, 1e30, NaN, "abc") is one error
// line naming the flag, the value and the range, never a silent default or an internal error
// later. A flag's unset default may lie outside its range (e.g. 0 = "from the model"): only
// given values are checked. The ranges are shown by --help and listed in docs/flags.md.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace zt::app {

// The values a numeric flag accepts: lo..hi (either end open), plus optionally one special
// value outside it with a documented meaning (e.g. --max_steps -1: from --num_train_epochs).
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::optional<double> special;
  bool contains(double v) const;
  // "an integer in [1, 1048576]", "-1 or an integer in [1, 1e15]", "a number in (0, 1]", ...
  std::string describe(bool integer) const;
  Range or_value(double v) const {
    Range r = *this;
    r.special = v;
    return r;
  }
};
namespace range {
inline Range make(double lo, double hi, bool lo_open, bool hi_open) {
  Range r;
  r.lo = lo;
  r.hi = hi;
  r.lo_open = lo_open;
  r.hi_open = hi_open;
  return r;
}
inline Range closed(double lo, double hi) { return make(lo, hi, false, false); }  // [lo, hi]
inline Range at_least(double lo) {                                                // [lo, inf)
  return make(lo, std::numeric_limits<double>::infinity(), false, false);
}
inline Range above(double lo, double hi = std::numeric_limits<double>::infinity()) {  // (lo, hi]
  return make(lo, hi, true, false);
}
inline Range below(double lo, double hi) { return make(lo, hi, false, true); }  // [lo, hi)
}  // namespace range

// Upper bounds shared by several flags: far past any real run, and low enough that the products
// the code forms from them (B x T, steps x sequences, bytes of a bucket) stay inside int64.
namespace limits {
constexpr double kMaxSteps = 1e15;      // steps, samples, bucket elements
constexpr double kMaxBatch = 1 << 20;   // sequences per micro-batch, accumulation, group sizes
constexpr double kMaxLength = 1 << 24;  // sequence length (config.json's context limit)
constexpr double kMaxThreads = 1024;    // compute threads
constexpr double kMaxVocab = 1 << 30;   // token ids (config.json's vocab_size limit)
}  // namespace limits

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}
  void add(const std::string& name, std::string* v, const std::string& help);
  void add(const std::string& name, int* v, const std::string& help, Range r);
  void add(const std::string& name, int64_t* v, const std::string& help, Range r);
  void add(const std::string& name, double* v, const std::string& help, Range r);
  // A bool flag alone means true; "--flag true|false" is also accepted.
  void add(const std::string& name, bool* v, const std::string& help);
  // Parses args (without the program and subcommand); throws zt::Error on bad input.
  void parse(const std::vector<std::string>& args);
  std::string help() const;
  // Names that are not flags of this command but are known elsewhere (HF TrainingArguments):
  // given, they are refused with `why` instead of "unknown flag; did you mean".
  void refuse(const std::set<std::string>& names, std::string why) {
    refused_ = names;
    refused_why_ = std::move(why);
  }
  // One such name with its own reason (what to use instead), which wins over refuse()'s.
  void refuse_because(const std::string& name, std::string why) { refused_because_[name] = std::move(why); }
  // Names of the flags parse() saw (without "--"), so a config file can tell an explicit
  // value from a default (DeepSpeed JSON vs HF flags, docs/deepspeed.md).
  const std::set<std::string>& given() const { return given_; }

 private:
  enum class Kind { str, i32, i64, f64, boolean };
  struct Flag {
    std::string name, help;
    Kind kind;
    void* ptr;
    Range range;
  };
  const Flag* find(const std::string& name) const;
  std::string nearest(const std::string& name) const;
  void parse_number(const Flag& f, const std::string& value);
  std::string command_;
  std::vector<Flag> flags_;
  std::set<std::string> given_;
  std::set<std::string> refused_;
  std::string refused_why_;
  std::map<std::string, std::string> refused_because_;
};

}  // namespace zt::app
