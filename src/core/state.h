// state.h: the one way every stateful component (model parameters, optimizer, LR scheduler,
// data cursor, RNG, trainer counters; later the loss scaler and adapters) saves and loads
// its state, so one checkpointer (checkpoint/checkpoint.h) covers them all and resume is exact.
//
// A component writes two kinds of state through a StateWriter:
//   - tensor pieces: (tensor name, slice of the global tensor, slot, data). A piece names the
//     global tensor, never the writer's buffer layout, so a reader holding another layout
//     (another number of ranks, ZeRO stage, or later a tensor-parallel split) asks for the
//     slices it needs and the checkpoint assembles them from whatever pieces were written;
//   - JSON values under dotted keys ("ztrain.loss_sum" is state["ztrain"]["loss_sum"]).
// It deliberately is not a file format: StateWriter / StateReader are abstract; the
// checkpointer decides where pieces and values are stored.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace zt {

// Which part of a global tensor a piece holds: the elements [begin, begin + count) of the
// tensor flattened row-major. Room for tensor parallelism: a slice along one dimension
// (dim >= 0: indices [offset, offset + length) of that dimension, e.g. a column slice of a
// GPT-2 Conv1D [in, out] weight) that begin / count then index into; not implemented yet
// (writers and readers reject dim >= 0).
struct TensorSlice {
  int64_t begin = 0, count = 0;
  int dim = -1;
  int64_t offset = 0, length = 0;
};

struct StatePiece {
  std::string tensor;          // the global tensor: an HF parameter name
  std::vector<int64_t> shape;  // its global shape
  std::string slot;            // "params", or an optimizer slot ("exp_avg", "exp_avg_sq", ...)
  TensorSlice slice;
  float* data = nullptr;     // slice.count values (read-only when saving)
  DType dtype = DType::f32;  // fp32 today: masters and optimizer state are fp32
  // Saving, instead of data: fills slice.count values when the checkpoint writes the piece (state
  // kept on disk streams into the checkpoint one piece at a time instead of whole in memory).
  // Writers that keep pieces past the save (flash snapshots) refuse it.
  std::function<void(float*)> fill = {};
};

class StateWriter {
 public:
  virtual ~StateWriter() = default;
  // Records a piece; its data must stay unchanged until the checkpoint is written.
  virtual void put_tensor(const StatePiece& piece) = 0;
  // Sets a JSON value; each key is written once (a second write is our bug).
  virtual void put_json(const std::string& key, const nlohmann::json& value) = 0;
};

class StateReader {
 public:
  virtual ~StateReader() = default;
  // Fills piece.data with the slice of the stored tensor (slot, tensor), assembled from any
  // stored pieces; throws an Error if the stored tensor has another shape or the stored
  // pieces do not cover the slice.
  virtual void get_tensor(const StatePiece& piece) = 0;
  // The value at key, or null when absent.
  virtual const nlohmann::json* find_json(const std::string& key) const = 0;
  // Where the values come from, for messages (a file path).
  virtual std::string source() const = 0;

  // Typed access: an Error naming the key and the source when it is missing or mistyped.
  const nlohmann::json& get_json(const std::string& key) const { return need(key, true, "present"); }
  int64_t get_int(const std::string& key) const {
    return need(key, find_json(key) && find_json(key)->is_number_integer(), "an integer").get<int64_t>();
  }
  double get_number(const std::string& key) const {
    return need(key, find_json(key) && find_json(key)->is_number(), "a number").get<double>();
  }
  bool get_bool(const std::string& key) const {
    return need(key, find_json(key) && find_json(key)->is_boolean(), "true or false").get<bool>();
  }
  std::string get_string(const std::string& key) const {
    return need(key, find_json(key) && find_json(key)->is_string(), "a string").get<std::string>();
  }

 private:
  const nlohmann::json& need(const std::string& key, bool ok, const char* what) const {
    const nlohmann::json* v = find_json(key);
    ZT_CHECK(v && ok, source(), ": \"", key, "\" is missing or not ", what,
             "; the checkpoint is damaged or from another ztrain version");
    return *v;
  }
};

class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual void save_state(StateWriter& w) const = 0;
  // May be a collective for a sharded component (every rank calls it).
  virtual void load_state(StateReader& r) = 0;
};

// A component whose state is a fixed list of pieces (an engine's parameters): load_state
// fills them, then runs after_load (ZeRO-1/2: the all-gather that spreads loaded shards);
// save_state runs before_save first (offload: the parameters read from disk into the pieces) and
// load_state before_load (offload: the update in flight finished).
class PieceState final : public Stateful {
 public:
  std::vector<StatePiece> pieces;
  std::function<void()> after_load, before_save, before_load;

  void save_state(StateWriter& w) const override {
    if (before_save) before_save();
    for (const StatePiece& p : pieces) w.put_tensor(p);
  }
  void load_state(StateReader& r) override {
    if (before_load) before_load();
    for (const StatePiece& p : pieces) r.get_tensor(p);
    if (after_load) after_load();
  }
};

// Which state file a rank writes: shard `index` of `count`; index < 0: none (another rank
// writes the same state: DDP's ranks > 0, hybrid sharding's groups after the first).
struct StateShard {
  int index = 0, count = 1;
};

// JSON values by dotted key in one document: the checkpoint's trainer_state.json, and
// TrainLog's final one. Tensor pieces are not its business (put_tensor is our bug).
class JsonStateWriter final : public StateWriter {
 public:
  explicit JsonStateWriter(nlohmann::json* doc) : doc_(doc) {}
  void put_tensor(const StatePiece& p) override {
    ZT_ASSERT(false, "tensor ", p.tensor, " written to a JSON-only state writer");
  }
  void put_json(const std::string& key, const nlohmann::json& value) override {
    const nlohmann::json::json_pointer ptr(json_pointer(key));
    ZT_ASSERT(!doc_->contains(ptr), "state key ", key, " written twice");
    (*doc_)[ptr] = value;
  }
  // "a.b" -> "/a/b" (keys never hold '/' or '~').
  static std::string json_pointer(const std::string& key) {
    std::string p = "/" + key;
    for (char& c : p)
      if (c == '.') c = '/';
    return p;
  }

 private:
  nlohmann::json* doc_;
};

}  // namespace zt
