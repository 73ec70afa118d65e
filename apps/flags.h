// flags.h: a small typed command-line parser with HF-style "--name value" and
// "--name=value" flags. Unknown flags are rejected with the nearest known name;
// malformed values are rejected naming the flag and the expected type.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace zt::app {

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}
  void add(const std::string& name, std::string* v, const std::string& help);
  void add(const std::string& name, int* v, const std::string& help);
  void add(const std::string& name, int64_t* v, const std::string& help);
  void add(const std::string& name, double* v, const std::string& help);
  // A bool flag alone means true; "--flag true|false" is also accepted.
  void add(const std::string& name, bool* v, const std::string& help);
  // Parses args (without the program and subcommand); throws zt::Error on bad input.
  void parse(const std::vector<std::string>& args);
  std::string help() const;
  // Names of the flags parse() saw (without "--"), so a config file can tell an explicit
  // value from a default (DeepSpeed JSON vs HF flags, docs/deepspeed.md).
  const std::set<std::string>& given() const { return given_; }

 private:
  enum class Kind { str, i32, i64, f64, boolean };
  struct Flag {
    std::string name, help;
    Kind kind;
    void* ptr;
  };
  const Flag* find(const std::string& name) const;
  std::string nearest(const std::string& name) const;
  std::string command_;
  std::vector<Flag> flags_;
  std::set<std::string> given_;
};

}  // namespace zt::app
