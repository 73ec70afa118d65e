// hf_export.cpp: the final HF folder streamed to the chief (see hf_export.h).
#include "checkpoint/hf_export.h"

#include "checkpoint/peft_files.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

#include "checkpoint/hf_model.h"
#include "core/error.h"
#include "models/layout.h"

namespace zt {
namespace {

// One piece of a global tensor this rank holds: elements [begin, begin + count) of tensor `tensor`
// (its index in the HF order). What the chief learns of every rank before the data flows.
struct Row {
  int64_t tensor, begin, count;
};

// The "params" pieces a component writes; their data stays in the engine's buffers.
class ParamPieces final : public StateWriter {
 public:
  std::vector<StatePiece> pieces;
  void put_tensor(const StatePiece& p) override {
    if (p.slot == "params") pieces.push_back(p);
  }
  void put_json(const std::string&, const nlohmann::json&) override {}
};

constexpr int kRowsTag = 7301, kDataTag = 7302;
constexpr size_t kF32 = sizeof(float);

// Each tensor's place in the order the chief writes (and so asks for) the tensors: the weight
// files' (hf_shard_plan), which every rank computes alike; rows and messages follow it.
// The files hold stored tensors: each a run of the list's tensors (several where the folder
// fuses them, hf_stored); a run's tensors are written one after the other.
std::vector<int64_t> write_positions(const ModelConfig& cfg, const std::vector<ParamInfo>& list, DType dtype,
                                     int64_t max_shard_bytes) {
  std::vector<int64_t> bytes;
  std::vector<std::vector<size_t>> stored;
  for (size_t i = 0; i < list.size();) {
    const std::string name = hf_stored(cfg, list[i].name, list[i].shape).name;
    stored.emplace_back();
    bytes.push_back(0);
    for (; i < list.size() && hf_stored(cfg, list[i].name, list[i].shape).name == name; ++i) {
      stored.back().push_back(i);
      bytes.back() += list[i].numel * int64_t(dtype_size(dtype));
    }
  }
  std::vector<int64_t> pos(list.size());
  int64_t next = 0;
  for (const std::vector<size_t>& file : hf_shard_plan(bytes, max_shard_bytes))
    for (size_t s : file)
      for (size_t i : stored[s]) pos[i] = next++;
  return pos;
}

// This rank's pieces in write order (a tensor's runs in the order written), their data beside.
void pieces_in_write_order(const ParamPieces& mine, const std::vector<ParamInfo>& list,
                           const std::map<std::string, int64_t>& index, const std::vector<int64_t>& pos,
                           std::vector<Row>& rows, std::vector<const float*>& data) {
  std::vector<int64_t> t;
  for (const StatePiece& p : mine.pieces) {
    auto it = index.find(p.tensor);
    ZT_CHECK(it != index.end() && p.shape == list[size_t(it->second)].shape, "exporting the model: tensor ", p.tensor,
             " is not one of the model's tensors with that shape (a bug)");
    t.push_back(it->second);
  }
  std::vector<size_t> order(t.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return pos[size_t(t[a])] < pos[size_t(t[b])]; });
  for (size_t k : order) {
    rows.push_back({t[k], mine.pieces[k].slice.begin, mine.pieces[k].slice.count});
    data.push_back(mine.pieces[k].data);
  }
}

// A sender: its rows, then one message per tensor it holds pieces of, in write order; a send
// waits until the chief has reached that tensor, so one packed tensor is in flight at most
// (a DDP writer's or a ZeRO shard's one piece of a tensor is sent from where it lies).
void send_to_chief(dist::Communicator& world, const std::vector<Row>& rows, const std::vector<const float*>& data) {
  if (!rows.empty()) world.send(rows.data(), rows.size() * sizeof(Row), 0, kRowsTag);
  std::vector<float> buf;
  for (size_t k = 0; k < rows.size();) {
    size_t e = k;
    int64_t total = 0;
    while (e < rows.size() && rows[e].tensor == rows[k].tensor) total += rows[e++].count;
    const float* src = data[k];  // one piece goes from its buffer; several are packed first
    if (e - k > 1) {
      buf.resize(size_t(total));
      int64_t at = 0;
      for (size_t j = k; j < e; ++j) {
        std::memcpy(buf.data() + at, data[j], size_t(rows[j].count) * kF32);
        at += rows[j].count;
      }
      src = buf.data();
    }
    world.send(src, size_t(total) * kF32, 0, kDataTag);
    k = e;
  }
}

// The chief's side: every rank's rows; then each tensor, when the writer asks for it (fill), is
// assembled from its pieces, the chief's from its buffers and the others' as they arrive.
class ChiefAssembler {
 public:
  ChiefAssembler(dist::Communicator& world, const std::vector<ParamInfo>& list, const std::vector<int64_t>& pos,
                 const std::vector<Row>& rows, const std::vector<const float*>& data,
                 const std::vector<int64_t>& counts)
      : world_(world),
        list_(list),
        pos_(pos),
        data_(data),
        of_(size_t(world.size())),
        cursor_(size_t(world.size()), 0) {
    of_[0] = rows;
    for (int r = 1; r < world.size(); ++r)
      if (counts[size_t(r)] > 0) {
        of_[size_t(r)].resize(size_t(counts[size_t(r)]));
        world.recv(of_[size_t(r)].data(), of_[size_t(r)].size() * sizeof(Row), r, kRowsTag);
      }
  }

  // A tensor the chief holds whole in one piece, and nobody else holds, is written from its buffer
  // (DDP: every tensor of the chief's stage): no copy. Null for the others.
  std::vector<const float*> whole_on_chief() const {
    std::vector<const float*> whole_here(list_.size(), nullptr);
    const std::vector<Row>& rows = of_[0];
    for (size_t j = 0; j < rows.size(); ++j)
      if (rows[j].begin == 0 && rows[j].count == list_[size_t(rows[j].tensor)].numel)
        whole_here[size_t(rows[j].tensor)] = data_[j];
    for (size_t r = 1; r < of_.size(); ++r)
      for (const Row& row : of_[r]) whole_here[size_t(row.tensor)] = nullptr;
    return whole_here;
  }

  // Tensor i into dst: every rank's pieces of it, in rank order; the tensors before it in write
  // order that a rank holds pieces of were written from its buffer and are skipped.
  void fill(size_t i, float* dst) {
    std::vector<std::pair<int64_t, int64_t>> got;
    for (int r = 0; r < int(of_.size()); ++r) {
      const std::vector<Row>& rr = of_[size_t(r)];
      size_t& c = cursor_[size_t(r)];
      while (c < rr.size() && pos_[size_t(rr[c].tensor)] < pos_[i]) ++c;  // written from its buffer
      size_t e = c;
      int64_t total = 0;
      while (e < rr.size() && rr[e].tensor == int64_t(i)) total += rr[e++].count;
      if (e == c) continue;
      if (r != 0) {
        recv_.resize(size_t(total));
        world_.recv(recv_.data(), size_t(total) * kF32, r, kDataTag);
      }
      int64_t at = 0;
      for (size_t j = c; j < e; ++j) {
        const float* src = r == 0 ? data_[j] : recv_.data() + at;
        std::memcpy(dst + rr[j].begin, src, size_t(rr[j].count) * kF32);
        got.push_back({rr[j].begin, rr[j].begin + rr[j].count});
        at += rr[j].count;
      }
      c = e;
    }
    check_covered(i, got);
  }

 private:
  // The pieces [begin, end) received must cover the whole tensor.
  void check_covered(size_t i, std::vector<std::pair<int64_t, int64_t>>& got) const {
    std::sort(got.begin(), got.end());
    int64_t reach = 0;
    for (const auto& [b, e] : got) {
      if (b > reach) break;
      reach = std::max(reach, e);
    }
    ZT_CHECK(reach >= list_[i].numel, "exporting the model: elements ", reach, " to ", list_[i].numel, " of ",
             list_[i].name, " came from no rank (a bug in the layout's checkpoint pieces)");
  }

  dist::Communicator& world_;
  const std::vector<ParamInfo>& list_;
  const std::vector<int64_t>& pos_;
  const std::vector<const float*>& data_;
  std::vector<std::vector<Row>> of_;  // every rank's rows (the chief's own first)
  std::vector<size_t> cursor_;        // per rank: its next row
  std::vector<float> recv_;
};

}  // namespace

void hf_export_streamed(dist::Communicator& world, const std::vector<Stateful*>& params, bool writer,
                        const ModelConfig& cfg, const std::string& folder, DType dtype, int64_t max_shard_bytes,
                        const std::string& peft_base) {
  const ModelLayout whole = model_layout(cfg);  // HF names and global shapes, in the folder's order
  const std::vector<ParamInfo>& list = whole.table.list();
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < list.size(); ++i) index[list[i].name] = int64_t(i);
  const std::vector<int64_t> pos = write_positions(cfg, list, dtype, max_shard_bytes);
  ParamPieces mine;
  if (writer)
    for (Stateful* s : params) s->save_state(mine);
  std::vector<Row> rows;
  std::vector<const float*> data;
  pieces_in_write_order(mine, list, index, pos, rows, data);
  std::vector<int64_t> counts(size_t(world.size()), 0);
  const int64_t n = int64_t(rows.size());
  world.all_gather(&n, counts.data(), sizeof(int64_t));
  if (world.rank() != 0) {
    send_to_chief(world, rows, data);
    return;
  }
  ChiefAssembler chief(world, list, pos, rows, data, counts);
  const std::vector<const float*> whole_here = chief.whole_on_chief();
  std::vector<StTensorOut> tensors;
  for (size_t i = 0; i < list.size(); ++i)
    tensors.push_back({list[i].name, list[i].shape, whole_here[i], [&chief, i](float* dst) { chief.fill(i, dst); }});
  if (cfg.lora.enabled())  // LoRA: the adapters only, in PEFT's folder format
    peft_save_adapters(cfg, tensors, folder, peft_base);
  else
    hf_save_tensors(cfg, tensors, folder, dtype, max_shard_bytes);
}

}  // namespace zt
