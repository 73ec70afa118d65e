// deepspeed_values.h: reading DeepSpeed config values with type checks (one error line naming the
// dotted key, the expected type and the value), showing values in messages as HF prints them, and
// the keys DeepSpeed knows that ztrain accepts without acting on them. Shared by
// deepspeed_config.cpp's section walkers; not an API.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace zt::ds_values {

using json = nlohmann::json;

bool is_auto(const json& v);
std::string show_json(const json& v);
// Like Python's repr(float), which HF's messages print: shortest round-trip digits, fixed
// notation for exponents -4..15 (0.0001, 1.0), scientific otherwise (1e-05).
std::string show(double x);
std::string show(int64_t x);
std::string show(int x);
std::string show(bool x);
[[noreturn]] void type_error(const std::string& key, const char* expected, const json& v, bool auto_ok);
// Integer keys also take an integral JSON float: DeepSpeed configs write bucket sizes as 5e8.
int64_t read_int(const std::string& key, const json& v, bool auto_ok, int64_t lo, int64_t hi);
void read(const std::string& key, const json& v, bool auto_ok, int64_t& out, int64_t lo, int64_t hi);
void read(const std::string& key, const json& v, bool auto_ok, int& out, int64_t lo, int64_t hi);
void read(const std::string& key, const json& v, bool auto_ok, double& out, int64_t lo, int64_t);
void read(const std::string& key, const json& v, bool auto_ok, bool& out, int64_t, int64_t);
std::string read_string(const std::string& key, const json& v);
void require_object(const std::string& key, const json& v);
const json* find(const json& obj, const char* key);

// ---- keys DeepSpeed knows that ztrain accepts without acting on them ----

enum class Kind { any, boolean, number, integer, object, string };

// quiet: the value (JSON text) that needs no warning because it is what ztrain does anyway;
// "" = every value is quiet (a tuning knob with no effect on results), "!" = always warn.
struct Inert {
  const char* key;
  Kind kind;
  const char* quiet;
};
const Inert* find_inert(const std::string& key);
// All of them (for "did you mean" suggestions).
std::span<const Inert> inert_keys();

}  // namespace zt::ds_values
