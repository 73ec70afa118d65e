// optimizer.cpp: see optimizer.h. The slot storage, checkpoint pieces, optim_args and the
// factory; the arithmetic lives in each optimizer's own file (adamw.cpp, lion_sgd.cpp, ...).
#include "optim/optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/edit_distance.h"
#include "core/error.h"
#include "core/tensor.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw_8bit.h"
#include "optim/lion_sgd.h"
#include "optim/muon.h"
#include "optim/sophia.h"

namespace zt::optim {

namespace {
std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}
}  // namespace

std::vector<StepPiece> flat_pieces(float* params, const float* grads, const std::vector<ParamRange>& ranges) {
  std::vector<StepPiece> pieces;
  pieces.reserve(ranges.size());
  for (const ParamRange& r : ranges)
    pieces.push_back({params + r.offset, grads + r.offset, r.offset, r.numel, r.decay});
  return pieces;
}

Optimizer::Optimizer(std::string name, const OptimizerConfig& cfg, int64_t numel, std::vector<std::string> slot_names)
    : name_(std::move(name)), cfg_(cfg), numel_(numel), slot_names_(std::move(slot_names)) {
  ZT_CHECK(cfg_.state_dtype == DType::f32 || cfg_.state_dtype == DType::bf16,
           "--optim_state_dtype must be fp32 or bf16, not ", dtype_name(cfg_.state_dtype));
  if (cfg_.external_state) return;  // the offload engine's files hold the slots
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    slots_.emplace_back(size_t(numel) * dtype_size(cfg_.state_dtype), MemCategory::optimizer_state);
    if (slots_.back().data()) std::memset(slots_.back().data(), 0, slots_.back().bytes());  // numel 0: none
  }
}

void Optimizer::bind_window(int64_t begin, int64_t n, const std::vector<void*>& slots) {
  ZT_ASSERT(cfg_.external_state && slots.size() == slot_names_.size(), "optimizer ", name_, ": window of ",
            slots.size(), " slots");
  window_ = slots;
  window_begin_ = begin;
  window_n_ = n;
}

void* Optimizer::slot_data(size_t i) const {
  if (window_.empty()) {
    ZT_ASSERT(i < slots_.size(), "optimizer ", name_, ": slot ", i, " is not in memory (external state, no window)");
    return slots_[i].data();
  }
  // The updates index a slot by state coordinate (base + state_offset), so a window at
  // window_begin_ is handed out as the address state coordinate 0 would have. Formed as an
  // integer: the address may lie outside any allocation and is only ever offset back into the
  // window (steps stay inside it; the engine's pieces are cut to it).
  const uintptr_t es = dtype_size(cfg_.state_dtype);
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(window_[i]) - uintptr_t(window_begin_) * es);
}

void Optimizer::set_layout(OptimizerLayout layout) {
  layout_ = std::move(layout);
  on_layout();
}

float* Optimizer::slot(size_t i) const {
  ZT_ASSERT(cfg_.state_dtype == DType::f32, "optimizer ", name_, ": slot ", i, " is not fp32");
  return static_cast<float*>(slot_data(i));
}

float* Optimizer::slot(const std::string& name) const {
  for (size_t i = 0; i < slot_names_.size(); ++i)
    if (slot_names_[i] == name) return slot(i);
  ZT_ASSERT(false, "optimizer ", name_, " has no state slot ", name);
  return nullptr;
}

double Optimizer::state_bytes_per_param() const {
  if (numel_ == 0) return 0.0;
  size_t bytes = 0;
  for (const Buffer& b : slots_) bytes += b.bytes();
  if (cfg_.external_state) bytes = slot_names_.size() * size_t(numel_) * dtype_size(cfg_.state_dtype);  // on disk
  return double(bytes + size_t(own_state_bytes())) / double(numel_);
}

void Optimizer::for_each_state(int64_t offset, int64_t n, int, const std::function<void(void*, size_t)>& f) {
  const size_t es = dtype_size(cfg_.state_dtype);
  for (Buffer& b : slots_) f(static_cast<char*>(b.data()) + size_t(offset) * es, size_t(n) * es);
}

float* Optimizer::save_scratch(int64_t n) const {
  scratch_.emplace_back(size_t(n));
  return scratch_.back().data();
}

void Optimizer::save_state(StateWriter& w) const {
  scratch_.clear();  // the previous checkpoint is written by now
  const bool bf16 = cfg_.state_dtype == DType::bf16;
  for (size_t s = 0; s < slot_names_.size(); ++s)
    for (const StateSpan& sp : spans_) {
      StatePiece piece{sp.tensor, sp.shape, slot_names_[s], {sp.begin, sp.count}, nullptr};
      if (cfg_.external_state) {
        // State on disk streams into the checkpoint one piece at a time (bf16 widened as below).
        piece.fill = [store = store_, s, sp, bf16](float* out) {
          if (!bf16) return store->read_range(s, sp.state_offset, sp.count, out);
          std::vector<uint16_t> h(size_t(sp.count));
          store->read_range(s, sp.state_offset, sp.count, h.data());
          for (int64_t i = 0; i < sp.count; ++i) out[i] = bf16_to_f32(h[size_t(i)]);
        };
      } else if (bf16) {  // bf16 state is saved widened to fp32 (exact both ways), so any run can read it
        piece.data = save_scratch(sp.count);
        const uint16_t* h = slots_[s].as<uint16_t>() + sp.state_offset;
        for (int64_t i = 0; i < sp.count; ++i) piece.data[i] = bf16_to_f32(h[i]);
      } else {
        piece.data = slots_[s].as<float>() + sp.state_offset;
      }
      w.put_tensor(piece);
    }
  save_own(w);
  // The hyper-parameters are recorded, not restored: a resumed run uses its own flags.
  w.put_json("ztrain.optimizer",
             {{"name", name_},
              {"step", t_},
              {"slots", slot_names_},
              {"state_dtype", dtype_name(cfg_.state_dtype)},
              {"config",
               {{"beta1", cfg_.beta1}, {"beta2", cfg_.beta2}, {"eps", cfg_.eps}, {"weight_decay", cfg_.weight_decay}}},
              {"args", cfg_.args}});
}

void Optimizer::load_state(StateReader& r) {
  const std::string saved = r.get_string("ztrain.optimizer.name");
  ZT_CHECK(saved == name_, r.source(), ": the checkpoint holds the state of --optim ", quote(saved), ", this run uses ",
           quote(name_), "; resume with --optim ", saved);
  const int64_t t = r.get_int("ztrain.optimizer.step");
  ZT_CHECK(t >= 0, r.source(), ": \"ztrain.optimizer.step\" is negative; the checkpoint is damaged");
  const bool bf16 = cfg_.state_dtype == DType::bf16;
  std::vector<float> wide;
  std::vector<uint16_t> narrow;
  for (size_t s = 0; s < slot_names_.size(); ++s)
    for (const StateSpan& sp : spans_) {
      if (!bf16 && !cfg_.external_state) {
        r.get_tensor({sp.tensor, sp.shape, slot_names_[s], {sp.begin, sp.count}, slot(s) + sp.state_offset});
        continue;
      }
      wide.resize(size_t(sp.count));
      r.get_tensor({sp.tensor, sp.shape, slot_names_[s], {sp.begin, sp.count}, wide.data()});
      void* dst = wide.data();
      if (bf16) {
        narrow.resize(size_t(sp.count));
        uint16_t* h = cfg_.external_state ? narrow.data() : slots_[s].as<uint16_t>() + sp.state_offset;
        for (int64_t i = 0; i < sp.count; ++i) h[i] = f32_to_bf16(wide[size_t(i)]);
        dst = h;
      }
      // State on disk: written back one piece at a time (pieces absent keep the files' values).
      if (cfg_.external_state) store_->write_range(s, sp.state_offset, sp.count, dst);
    }
  load_own(r);
  t_ = t;
}

double Optimizer::arg(const std::string& key, double fallback) const {
  auto it = cfg_.args.find(key);
  if (it == cfg_.args.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(str_cat("--optim_args ", key, "=", quote(it->second), " is not a number (", name_, ")"));
}

bool Optimizer::arg_flag(const std::string& key, bool fallback) const {
  auto it = cfg_.args.find(key);
  if (it == cfg_.args.end()) return fallback;
  std::string v = it->second;
  for (auto& c : v) c = char(std::tolower((unsigned char)c));
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw Error(str_cat("--optim_args ", key, "=", quote(it->second), " must be true or false (", name_, ")"));
}

std::string Optimizer::arg_text(const std::string& key, const std::string& fallback) const {
  auto it = cfg_.args.find(key);
  return it == cfg_.args.end() ? fallback : it->second;
}

void Optimizer::refuse_unknown_args(const std::vector<std::string>& known) const {
  for (const auto& [k, v] : cfg_.args)
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw Error(str_cat("--optim_args key ", quote(k), " is not used by --optim ", name_,
                          "; its keys: ", known.empty() ? std::string("none") : joined(known)));
}

namespace {

struct Entry {
  const char* name;
  const char* canonical;
};
// HF's --optim names (and DeepSpeed's optimizer.type lower-cased); an alias makes the canonical
// name, which checkpoints record.
constexpr Entry kNames[] = {
    {"adamw_torch", "adamw_torch"}, {"adamw", "adamw_torch"},     {"adamw_torch_fused", "adamw_torch"},
    {"adafactor", "adafactor"},     {"adamw_8bit", "adamw_8bit"}, {"adamw_bnb_8bit", "adamw_8bit"},
    {"lion", "lion_32bit"},         {"lion_32bit", "lion_32bit"}, {"sgd", "sgd"},
    {"sophia", "sophia"},           {"sophiag", "sophia"},        {"muon", "muon"}};

}  // namespace

std::vector<std::string> optimizer_names() {
  std::vector<std::string> v;
  for (const Entry& e : kNames) v.push_back(e.name);
  return v;
}

std::unique_ptr<Optimizer> make_canonical(const std::string& c, const OptimizerConfig& cfg, int64_t numel);

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerConfig& cfg, int64_t numel) {
  const Entry* e = nullptr;
  for (const Entry& k : kNames)
    if (name == k.name) e = &k;
  if (!e) {
    std::string best = kNames[0].name;
    for (const Entry& k : kNames)
      if (edit_distance(name, k.name) < edit_distance(name, best)) best = k.name;
    throw Error(str_cat("--optim ", quote(name), " is not supported; did you mean ", best,
                        "? Known: ", joined(optimizer_names())));
  }
  std::unique_ptr<Optimizer> o = make_canonical(e->canonical, cfg, numel);
  ZT_CHECK(!cfg.external_state || o->offloadable(), "--optim ", name,
           " cannot be offloaded to disk: its state is not elementwise (factored, quantized or per-matrix), so it "
           "cannot be streamed in windows; offload_optimizer nvme supports adamw_torch, lion_32bit, sgd and sophia");
  return o;
}

std::unique_ptr<Optimizer> make_canonical(const std::string& c, const OptimizerConfig& cfg, int64_t numel) {
  if (c == "adamw_torch") return std::make_unique<AdamW>(cfg, numel);
  if (c == "adafactor") return std::make_unique<Adafactor>(cfg, numel);
  if (c == "adamw_8bit") return std::make_unique<AdamW8bit>(cfg, numel);
  if (c == "lion_32bit") return std::make_unique<Lion>(cfg, numel);
  if (c == "sgd") return std::make_unique<Sgd>(cfg, numel);
  if (c == "sophia") return std::make_unique<Sophia>(cfg, numel);
  return std::make_unique<Muon>(cfg, numel);
}

double optimizer_state_bytes_per_param(const std::string& name, const OptimizerConfig& cfg) {
  std::unique_ptr<Optimizer> o = make_optimizer(name, cfg, 0);
  const double s = double(dtype_size(cfg.state_dtype));
  const std::string& c = o->name();
  if (c == "adamw_8bit") return 2.0 + 2.0 * 4.0 / double(AdamW8bit::kBlock);
  if (c == "adafactor") return Adafactor::first_moment(cfg) ? 4.0 : 0.0;
  if (c == "muon") return 2.0 * s;  // AdamW's, for the tensors that are not hidden matrices
  return double(o->slot_names().size()) * s;
}

std::map<std::string, std::string> parse_optim_args(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  auto trim = [](std::string s) {
    while (!s.empty() && std::isspace((unsigned char)s.back())) s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
    return s.substr(i);
  };
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = trim(text.substr(at, comma - at));
    at = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    ZT_CHECK(eq != std::string::npos && eq > 0, "--optim_args item ", quote(item),
             " is not key=value (HF's form: \"key1=value1,key2=value2\")");
    out[trim(item.substr(0, eq))] = trim(item.substr(eq + 1));
  }
  return out;
}

}  // namespace zt::optim
