// jinja_budget.cpp: what keeps a hostile chat template bounded (see jinja.h, Limits): the
// per-render budget the evaluator and the builtins charge, Python's integer arithmetic in 64 bits
// (exact, or one "integer overflow" error; never undefined behaviour), the iterative release of
// deeply nested values, and a string search whose time is linear in its inputs.
// Not here: where the charges are made (jinja_eval.cpp, jinja_builtins.cpp, jinja_filters.cpp).
#include <cmath>
#include <limits>

#include "core/error.h"
#include "text/jinja_internal.h"

namespace zt::jinja {

// ---- Budget ----

namespace {
thread_local Budget* current_budget = nullptr;
const Limits kDefaultLimits;
constexpr int64_t kStepsPerItem = 4;     // a Value is about 100 bytes
constexpr int64_t kBytesPerStep = 16;    // copying 16 bytes costs about what evaluating a node does
}  // namespace

Budget::Budget(const Limits& limits) : limits_(limits), outer_(current_budget) { current_budget = this; }
Budget::~Budget() { current_budget = outer_; }

const Limits& Budget::limits() { return current_budget ? current_budget->limits_ : kDefaultLimits; }

void Budget::steps(int64_t n) {
  Budget* b = current_budget;
  if (!b) return;
  b->used_ += n;
  if (b->used_ > b->limits_.max_steps)
    render_fail(str_cat("the render needs more than ", b->limits_.max_steps,
                        " steps, its budget (a template that loops or recurses without end? a real template that "
                        "needs more: raise --chat_template_max_steps)"));
}

void Budget::string(size_t bytes) {
  const Limits& l = limits();
  if (bytes > l.max_string_bytes)
    render_fail(str_cat("a string or output of ", bytes, " bytes, more than the limit of ", l.max_string_bytes,
                        " bytes per render"));
  steps(int64_t(bytes / kBytesPerStep));
}

void Budget::fits(size_t bytes) {
  const Limits& l = limits();
  if (bytes > l.max_string_bytes)
    render_fail(str_cat("a string or output longer than ", l.max_string_bytes, " bytes, the limit per render"));
}

void Budget::list(size_t items) {
  const Limits& l = limits();
  if (items > l.max_items)
    render_fail(str_cat("a list of ", items, " items, more than the limit of ", l.max_items, " items per list"));
  steps(int64_t(items) * kStepsPerItem);
}

void Budget::copy(const Array& items) {
  list(items.size());
  size_t bytes = 0;
  for (const Value& v : items) bytes += v.s.size();
  steps(int64_t(bytes / kBytesPerStep));
}

void Budget::depth(int depth) {
  const int max = limits().max_depth;
  if (depth > max)
    render_fail(str_cat("a value nested deeper than ", max,
                        " levels (the limit; a list or namespace that contains itself?)"));
}

// ---- Integers ----

namespace {
[[noreturn]] void overflow(int64_t a, const char* op, int64_t b) {
  render_fail(str_cat("integer overflow: ", a, " ", op, " ", b,
                      " does not fit in 64 bits (Python's integers are unbounded; a template's are 64-bit here)"));
}
}  // namespace

int64_t int_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow(a, "+", b);
  return r;
}
int64_t int_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow(a, "-", b);
  return r;
}
int64_t int_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow(a, "*", b);
  return r;
}
int64_t int_neg(int64_t a) {
  if (a == std::numeric_limits<int64_t>::min()) overflow(0, "-", a);
  return -a;
}
int64_t int_pow(int64_t base, int64_t exp) {
  // Squaring; |base| <= 1 never overflows, so a huge exponent costs log2(exp) steps at most.
  int64_t result = 1, b = base;
  for (int64_t e = exp; e > 0; e >>= 1) {
    if (e & 1) {
      if (__builtin_mul_overflow(result, b, &result)) overflow(base, "**", exp);
    }
    // b is squared only when a higher bit of exp will multiply it into result, and |result| >= 1
    // for a non-zero base: so an overflow here is an overflow of the answer.
    if (e > 1 && __builtin_mul_overflow(b, b, &b)) overflow(base, "**", exp);
  }
  return result;
}
int64_t int_floordiv(int64_t a, int64_t b) {
  // INT64_MIN / -1 is 2^63: the one quotient that leaves 64 bits (and a SIGFPE in the hardware).
  if (b == -1) return int_neg(a);
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t int_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 traps in the hardware; Python gives 0
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
int64_t float_to_int(double d) {
  if (std::isnan(d)) render_fail("cannot convert float NaN to integer");
  if (std::isinf(d)) render_fail("cannot convert float infinity to integer");
  // [-2^63, 2^63) is exactly the doubles that truncate to an int64.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    render_fail(str_cat("integer overflow: int(", float_repr(d), ") does not fit in 64 bits"));
  return int64_t(d);
}

// ---- Values ----

Value::~Value() {
  // Only the last owner of a list or dict has children to release. The outermost destructor on
  // this thread drains a queue of them, and nested ones only add to it, so the stack stays flat
  // however deep the nesting. (A plain pointer: it needs no destruction at thread exit.)
  const bool owns_array = a && a.use_count() == 1, owns_object = o && o.use_count() == 1;
  if (!owns_array && !owns_object) return;
  thread_local std::vector<Value>* pending = nullptr;
  std::vector<Value> queue;
  std::vector<Value>& into = pending ? *pending : queue;
  auto nested = [](const Value& v) { return v.a || v.o || v.f; };
  if (owns_array)
    for (Value& v : *a)
      if (nested(v)) into.push_back(std::move(v));
  if (owns_object)
    for (auto& kv : o->items)
      if (nested(kv.second)) into.push_back(std::move(kv.second));
  if (pending) return;
  pending = &queue;
  while (!queue.empty()) {
    Value v = std::move(queue.back());
    queue.pop_back();
  }  // each v's destructor queues its own children
  pending = nullptr;
}

// ---- Strings ----

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

size_t find_linear(const std::string& s, const std::string& needle, size_t from) {
  // Short needles: the library's search is fast and its worst case is |s| x 64 at most.
  if (needle.size() <= 64 || from > s.size()) return s.find(needle, from);
  // Knuth-Morris-Pratt: the table says how far a partial match of the needle falls back.
  std::vector<size_t> fail(needle.size() + 1, 0);
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k];
    if (needle[i] == needle[k]) ++k;
    fail[i + 1] = k;
  }
  Budget::steps(int64_t((s.size() - from + needle.size()) / 16));
  for (size_t i = from, k = 0; i < s.size(); ++i) {
    while (k > 0 && s[i] != needle[k]) k = fail[k];
    if (s[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - needle.size();
  }
  return std::string::npos;
}

}  // namespace zt::jinja
