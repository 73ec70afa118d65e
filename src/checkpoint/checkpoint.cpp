// checkpoint.cpp: see checkpoint.h.
#include "checkpoint/checkpoint.h"

#include "checkpoint/peft_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/hf_model.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStatePrefix = "state-";
constexpr const char* kStateFormat = "ztrain-state";

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string state_file_name(int shard, int num_shards) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%05d-of-%05d.safetensors", kStatePrefix, shard, num_shards);
  return name;
}

fs::path checkpoint_dir(const std::string& output_dir, int64_t step, bool tmp) {
  return fs::path(output_dir) / ("checkpoint-" + std::to_string(step) + (tmp ? ".tmp" : ""));
}

// Collects a rank's pieces (written when every component has saved: the data pointers stay
// valid until then) and its JSON values.
class ShardWriter final : public StateWriter {
 public:
  explicit ShardWriter(nlohmann::json* doc) : json_(doc) {}
  void put_tensor(const StatePiece& p) override {
    ZT_ASSERT(p.slice.dim < 0, "checkpoints do not store slices along a dimension yet (", p.tensor, ")");
    ZT_ASSERT(p.dtype == DType::f32 && p.slice.begin >= 0 && p.slice.begin + p.slice.count <= numel_of(p.shape),
              p.tensor);
    ZT_ASSERT(p.data || p.fill, p.tensor, ": a piece without data");
    pieces_.push_back(p);
  }
  void put_json(const std::string& key, const nlohmann::json& value) override { json_.put_json(key, value); }
  const std::vector<StatePiece>& pieces() const { return pieces_; }

 private:
  JsonStateWriter json_;
  std::vector<StatePiece> pieces_;
};

// A writer's digest of a file it wrote (hashed as the bytes went out), for the chief's
// checksums.json: "<file>.digest" beside it in the .tmp folder, removed before the seal. Saves
// the chief reading every shard back (1.5 GB per rank for GPT-2 124M with Adam).
constexpr const char* kDigestSuffix = ".digest";

void write_digest(const fs::path& file, const FileDigest& d) {
  write_file_atomic(file.string() + kDigestSuffix,
                    nlohmann::json({{"xxh3_tree", d.hash}, {"bytes", d.size}, {"inode", d.inode}}).dump() + "\n");
}

// The digest a writer left for file, if it describes this very file (its inode and size: two
// writers of one name, such as local SGD's group chiefs, leave the file of the last rename and
// maybe the other's digest); otherwise the file is hashed.
std::pair<uint64_t, uint64_t> file_digest(const fs::path& file) {
  const fs::path side = file.string() + kDigestSuffix;
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && ::access(side.c_str(), F_OK) == 0) {
    std::ifstream f(side);
    const nlohmann::json d = nlohmann::json::parse(f, nullptr, false);
    if (d.is_object() && d.value("bytes", uint64_t(0)) == uint64_t(st.st_size) &&
        d.value("inode", uint64_t(0)) == uint64_t(st.st_ino) && d.contains("xxh3_tree") &&
        d["xxh3_tree"].is_number_unsigned())
      return {d["xxh3_tree"].get<uint64_t>(), uint64_t(st.st_size)};
  }
  return checkpoint_file_digest(file.string());
}

void write_shard(const fs::path& tmp, const StateShard& shard, const std::vector<StatePiece>& pieces,
                 const std::string& save_id, const ModelConfig& cfg) {
  for (const ShardFile& f : checkpoint_shard_files(shard, pieces, save_id, cfg)) {
    const fs::path path = tmp / f.name;
    write_digest(path, safetensors_write(path.string(), f.tensors, DType::f32, f.metadata));  // fsynced
  }
}

// The chief's part, after every shard is written: the JSON files, checksums.json over every
// file, then the rename that makes the checkpoint appear whole.
void finish(const fs::path& tmp, const fs::path& final_dir, const ModelConfig& cfg, nlohmann::json state,
            const std::string& save_id, const std::vector<std::pair<std::string, std::string>>& extra_files) {
  write_file_atomic((tmp / "config.json").string(), config_to_json(cfg, "float32").dump(2) + "\n");
  if (cfg.lora.enabled())
    write_file_atomic((tmp / kAdapterConfig).string(), peft_adapter_config(cfg, "").dump(2) + "\n");
  for (const auto& [name, bytes] : extra_files) write_file_atomic((tmp / name).string(), bytes);
  state["ztrain"]["save_id"] = save_id;
  write_file_atomic((tmp / "trainer_state.json").string(), state.dump(2) + "\n");
  nlohmann::json sums = nlohmann::json::object();
  std::vector<fs::path> sides;
  for (auto& e : fs::directory_iterator(tmp)) {
    const std::string name = e.path().filename().string();
    if (name == "checksums.json") continue;
    if (name.ends_with(kDigestSuffix)) {
      sides.push_back(e.path());
      continue;
    }
    auto [h, size] = file_digest(e.path());
    sums[name] = {{"xxh3_tree", h}, {"bytes", size}};
  }
  for (const fs::path& p : sides) fs::remove(p);
  const nlohmann::json doc = {{"save_id", save_id}, {"files", sums}};
  write_file_atomic((tmp / "checksums.json").string(), doc.dump(2) + "\n");  // fsyncs tmp too
  fs::remove_all(final_dir);  // a same-step checkpoint from an earlier, abandoned run
  fs::rename(tmp, final_dir);
  fsync_path(final_dir.parent_path(), true);
}

// Elements [first, first + n) of a stored tensor, read as a tensor of their own (the same
// bytes, narrowed): a slice is converted without reading the whole tensor.
void read_range(const SafetensorsFile& f, const StEntry& e, int64_t first, int64_t n, float* dst) {
  const uint64_t es = (e.end - e.begin) / uint64_t(e.numel());  // parsing checked the size
  StEntry sub = e;
  sub.shape = {n};
  sub.begin = e.begin + uint64_t(first) * es;
  sub.end = sub.begin + uint64_t(n) * es;
  f.read_f32(sub, dst);
}

}  // namespace

std::string checkpoint_tmp_dir(const std::string& output_dir, int64_t step) {
  return checkpoint_dir(output_dir, step, true).string();
}

void checkpoint_begin(const std::string& output_dir, int64_t step) {
  const fs::path tmp = checkpoint_dir(output_dir, step, true);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
}

// A shard owner's files. With one shard, parameters held whole go to model.safetensors under
// their HF names and shapes, the parts of a fused tensor (Phi-3's qkv_proj, gate_up_proj) as it,
// as the exported folder stores them (the checkpoint is then an HF model folder transformers
// loads); every other piece goes to the state file as a 1-D tensor "<slot>.<tensor>.<begin>",
// described in the metadata ("pieces": name -> {tensor, slot, shape, begin}) so no reader parses
// names.
std::vector<ShardFile> checkpoint_shard_files(const StateShard& shard, const std::vector<StatePiece>& pieces,
                                              const std::string& save_id, const ModelConfig& cfg) {
  if (shard.index < 0) return {};
  // LoRA: the adapters, under PEFT's file name (the checkpoint is then an adapter folder PEFT loads).
  ShardFile model_file{cfg.lora.enabled() ? kAdapterWeights : "model.safetensors", {}, {}, {}},
      state_file{state_file_name(shard.index, shard.count), {}, {}, {}};
  nlohmann::json desc = nlohmann::json::object();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StatePiece& p = pieces[i];
    if (shard.count == 1 && p.slot == "params" && p.slice.begin == 0 && p.slice.count == numel_of(p.shape)) {
      model_file.tensors.push_back({p.tensor, p.shape, p.data, p.fill});
      model_file.pieces.push_back(i);
      continue;
    }
    std::string name = p.slot + "." + p.tensor + "." + std::to_string(p.slice.begin);
    ZT_ASSERT(!desc.contains(name), "piece ", name, " written twice");
    desc[name] = {{"tensor", p.tensor}, {"slot", p.slot}, {"shape", p.shape}, {"begin", p.slice.begin}};
    state_file.tensors.push_back({std::move(name), {p.slice.count}, p.data, p.fill});
    state_file.pieces.push_back(i);
  }
  std::vector<ShardFile> out;
  if (!model_file.tensors.empty()) {
    // A fused tensor's parts lie back to back in the file (and in a flash snapshot's image): its
    // pieces stay listed one by one, in order.
    model_file.tensors = hf_fuse_tensors(cfg, model_file.tensors, false);
    model_file.metadata = {{"format", "pt"}, {"save_id", save_id}};
    out.push_back(std::move(model_file));
  }
  state_file.metadata = {{"format", kStateFormat},
                         {"shard", std::to_string(shard.index)},
                         {"num_shards", std::to_string(shard.count)},
                         {"pieces", desc.dump()},
                         {"save_id", save_id}};
  out.push_back(std::move(state_file));
  return out;
}

void checkpoint_write_file_image(const std::string& output_dir, int64_t step, const std::string& name,
                                 const void* image, uint64_t size, uint64_t checksum) {
  const fs::path path = checkpoint_dir(output_dir, step, true) / name;
  write_digest(path, write_renamed(path.string(), [&](const std::string& tmp) {
                 return write_image_file(tmp, image, size, checksum);
               }));
}

void checkpoint_write_shard(const std::string& output_dir, int64_t step, const StateShard& shard,
                            const std::vector<StatePiece>& pieces, const std::string& save_id, const ModelConfig& cfg) {
  for (const StatePiece& p : pieces) {
    ZT_ASSERT(p.slice.dim < 0, "checkpoints do not store slices along a dimension yet (", p.tensor, ")");
    ZT_ASSERT(p.dtype == DType::f32 && p.slice.begin >= 0 && p.slice.begin + p.slice.count <= numel_of(p.shape),
              p.tensor);
  }
  if (shard.index >= 0) write_shard(checkpoint_dir(output_dir, step, true), shard, pieces, save_id, cfg);
}

void checkpoint_seal(const std::string& output_dir, int64_t step, const ModelConfig& cfg, nlohmann::json state,
                     const std::string& save_id, const std::vector<std::pair<std::string, std::string>>& extra_files) {
  finish(checkpoint_dir(output_dir, step, true), checkpoint_dir(output_dir, step, false), cfg, std::move(state),
         save_id, extra_files);
}

void checkpoint_save(const CheckpointSaveOptions& o, const ModelConfig& cfg,
                     const std::vector<const Stateful*>& components) {
  ZT_ASSERT(!o.save_id.empty(), "checkpoint_save needs a save id");
  auto barrier = [&] {
    if (o.barrier) o.barrier();
  };
  if (o.chief) checkpoint_begin(o.output_dir, o.step);
  barrier();  // the folder exists before any rank writes into it
  nlohmann::json state;
  ShardWriter w(&state);
  for (const Stateful* c : components) c->save_state(w);
  checkpoint_write_shard(o.output_dir, o.step, o.shard, w.pieces(), o.save_id, cfg);
  barrier();  // every shard is written before the chief seals the folder
  if (o.chief) checkpoint_seal(o.output_dir, o.step, cfg, std::move(state), o.save_id, o.extra_files);
}

CheckpointReader::CheckpointReader(const std::string& dir, const ModelConfig& cfg, bool allow_model_changes,
                                   std::string verified_save_id, bool allow_context_change)
    : dir_(dir), save_id_(std::move(verified_save_id)) {
  if (save_id_.empty()) save_id_ = checkpoint_verify(dir);
  const fs::path d(dir);
  const ModelConfig saved = config_from_file((d / "config.json").string());
  compare_config(saved, cfg, allow_model_changes, allow_context_change);
  // Before the state files, optimizer state lived in optimizer.safetensors or zero_shard-* files.
  bool old_format = fs::exists(d / "optimizer.safetensors");
  for (auto& e : fs::directory_iterator(d)) old_format |= e.path().filename().string().rfind("zero_shard-", 0) == 0;
  ZT_CHECK(!old_format, dir,
           " was written by an older ztrain (optimizer.safetensors / zero_shard files), whose "
           "checkpoints do not load; resume it with the ztrain that wrote it");
  state_ = checkpoint_read_trainer_state((d / "trainer_state.json").string());
  // LoRA: the checkpoint's adapters must be this run's (same rank, scale and modules).
  ZT_CHECK(cfg.lora.enabled() == fs::exists(d / kAdapterConfig), dir,
           cfg.lora.enabled() ? " holds no LoRA adapters (no adapter_config.json); resume it without --use_peft"
                              : " holds LoRA adapters (adapter_config.json); resume it with --use_peft");
  if (cfg.lora.enabled()) {
    const LoraSpec had = peft_read_config(dir);
    ModelConfig was = cfg;
    was.lora = had;
    const bool same_ia3 = !had.ia3() || ia3_feedforward_modules(was) == ia3_feedforward_modules(cfg);
    ZT_CHECK(had.type == cfg.lora.type && had.dora == cfg.lora.dora && had.r == cfg.lora.r &&
                 had.alpha == cfg.lora.alpha && had.rslora == cfg.lora.rslora &&
                 lora_resolve_targets(was) == lora_resolve_targets(cfg) && same_ia3,
             dir, ": its adapters (r ", had.r, ", lora_alpha ", had.alpha, ") differ from this run's (r ", cfg.lora.r,
             ", lora_alpha ", cfg.lora.alpha, ") or adapt other modules; resume with the checkpoint's LoRA settings");
  }
  const char* weights = cfg.lora.enabled() ? kAdapterWeights : "model.safetensors";
  if (fs::exists(d / weights)) {
    files_.push_back(std::make_unique<SafetensorsFile>((d / weights).string()));
    const SafetensorsFile* f = files_.back().get();
    // A fused tensor (Phi-3's qkv_proj, gate_up_proj) holds the parameters' parts as row ranges;
    // checkpoints before it kept the parts under their own names.
    for (const StEntry& e : f->entries()) {
      const std::vector<HfStored> parts = hf_parts(saved, e.name, e.shape);
      if (parts.empty()) add("params", e.name, e.shape, {f, &e, 0, e.numel()});
      for (const HfStored& p : parts)
        add("params", p.name, p.shape, {f, &e, 0, p.shape[0] * p.shape[1], p.row * p.shape[1]});
    }
  }
  index_state_files();
  ZT_CHECK(!index_.empty(), dir, ": no model.safetensors and no ", kStatePrefix,
           "*.safetensors; not a ztrain checkpoint");
  for (auto& [key, t] : index_) {
    std::sort(t.pieces.begin(), t.pieces.end(), [](const Stored& a, const Stored& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < t.pieces.size(); ++i)
      ZT_CHECK(t.pieces[i].begin >= t.pieces[i - 1].begin + t.pieces[i - 1].count, dir, ": two pieces of ", key.first,
               " of ", quote(key.second), " overlap; the checkpoint is damaged");
  }
}

CheckpointReader::~CheckpointReader() = default;

// Every resolved setting, not a few: a changed n_head or norm epsilon once resumed silently.
void CheckpointReader::compare_config(const ModelConfig& saved, const ModelConfig& cfg, bool allow,
                                      bool allow_context) {
  nlohmann::json have = config_resolved_json(saved), want = config_resolved_json(cfg);
  // A long-context stage changes how positions are encoded, never a tensor's shape.
  for (const char* k : {"rope_scaling", "max_position_embeddings"}) {
    if (!allow_context) break;
    const nlohmann::json none;
    const nlohmann::json& h = have.contains(k) ? have[k] : none;
    const nlohmann::json& w = want.contains(k) ? want[k] : none;
    if (h != w)
      context_change_ += str_cat(context_change_.empty() ? "" : ", ", k, " ", h.is_null() ? "none" : h.dump(), " -> ",
                                 w.is_null() ? "none" : w.dump());
    have.erase(k);
    want.erase(k);
  }
  const std::string key = config_first_difference(have, want);
  if (key.empty()) return;
  auto value = [&](const nlohmann::json& j) { return j.contains(key) ? j[key].dump() : std::string("no value"); };
  model_change_ = str_cat("the model config ", quote(key), " differs: the checkpoint has ", value(have), ", this run ",
                          value(want));
  ZT_CHECK(allow, dir_, ": ", model_change_,
           "; resume with the checkpoint's config, or pass --resume_allow_changes model to continue with this one");
}

void CheckpointReader::index_state_files() {
  std::vector<fs::path> paths;
  for (auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind(kStatePrefix, 0) == 0) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(path.string()));
    const SafetensorsFile* f = files_.back().get();
    auto meta = [&](const char* k) {
      auto it = f->metadata().find(k);
      return it == f->metadata().end() ? std::string() : it->second;
    };
    const std::string p = path.string();
    ZT_CHECK(meta("format") == kStateFormat, p, ": not a ztrain state file");
    ZT_CHECK(meta("save_id") == save_id_, dir_, " mixes files of two saves: ", path.filename().string(),
             " has save id ", quote(meta("save_id")), " but checksums.json has ", save_id_,
             "; resume from another checkpoint");
    ZT_CHECK(meta("num_shards") == std::to_string(paths.size()), dir_, " has ", paths.size(), " state files but ",
             path.filename().string(), " says ", quote(meta("num_shards")), "; a shard is missing");
    // The name repeats the metadata, so distinct files are distinct shards.
    const std::string shard = meta("shard");
    const bool numeric = !shard.empty() && shard.size() < 9 && shard.find_first_not_of("0123456789") == shard.npos;
    ZT_CHECK(numeric && path.filename() == state_file_name(std::stoi(shard), int(paths.size())), p,
             ": its metadata \"shard\" ", quote(shard), " does not match its name; the checkpoint is damaged");
    const nlohmann::json desc = nlohmann::json::parse(meta("pieces"), nullptr, false);
    ZT_CHECK(desc.is_object(), p, ": metadata \"pieces\" is missing or not a JSON object; the checkpoint is damaged");
    for (const StEntry& e : f->entries()) {
      auto it = desc.find(e.name);
      const bool ok = it != desc.end() && it->is_object() && it->contains("tensor") && (*it)["tensor"].is_string() &&
                      it->contains("slot") && (*it)["slot"].is_string() && it->contains("shape") &&
                      (*it)["shape"].is_array() && it->contains("begin") && (*it)["begin"].is_number_unsigned() &&
                      !it->contains("dim") && e.shape.size() == 1;
      ZT_CHECK(ok, p, ": piece ", quote(e.name), " is not described in the metadata; the checkpoint is damaged");
      std::vector<int64_t> shape;
      for (const auto& x : (*it)["shape"]) {
        ZT_CHECK(x.is_number_unsigned() && x.get<uint64_t>() < (uint64_t(1) << 40), p, ": piece ", quote(e.name),
                 " has a malformed shape; the checkpoint is damaged");
        shape.push_back(x.get<int64_t>());
      }
      ZT_CHECK((*it)["begin"].get<uint64_t>() < (uint64_t(1) << 62), p, ": piece ", quote(e.name),
               " starts out of range; the checkpoint is damaged");
      add((*it)["slot"].get<std::string>(), (*it)["tensor"].get<std::string>(), std::move(shape),
          {f, &e, (*it)["begin"].get<int64_t>(), e.numel()});
    }
  }
}

void CheckpointReader::add(const std::string& slot, const std::string& tensor, std::vector<int64_t> shape, Stored s) {
  int64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow |= __builtin_mul_overflow(numel, d, &numel);
  ZT_CHECK(!overflow && s.begin + s.count <= numel, dir_, ": a piece of ", slot, " of ", quote(tensor),
           " lies outside the tensor; the checkpoint is damaged");
  auto [it, fresh] = index_.try_emplace({slot, tensor});
  if (fresh)
    it->second.shape = std::move(shape);
  else
    ZT_CHECK(it->second.shape == shape, dir_, ": the pieces of ", slot, " of ", quote(tensor),
             " disagree on its shape; the checkpoint is damaged");
  it->second.pieces.push_back(s);
}

void CheckpointReader::get_tensor(const StatePiece& piece) {
  ZT_ASSERT(piece.slice.dim < 0 && piece.dtype == DType::f32, piece.tensor);
  auto it = index_.find({piece.slot, piece.tensor});
  ZT_CHECK(it != index_.end(), dir_, ": no ", piece.slot, " of ", quote(piece.tensor),
           "; the checkpoint belongs to a different model or optimizer");
  ZT_CHECK(it->second.shape == piece.shape, dir_, ": ", quote(piece.tensor), " has shape ",
           nlohmann::json(it->second.shape).dump(), " there but ", nlohmann::json(piece.shape).dump(),
           " in this model; the checkpoint belongs to a different model");
  const int64_t b = piece.slice.begin, e = b + piece.slice.count;
  int64_t covered = 0;
  for (const Stored& s : it->second.pieces) {
    const int64_t lo = std::max(b, s.begin), hi = std::min(e, s.begin + s.count);
    if (lo >= hi) continue;
    read_range(*s.file, *s.entry, s.at + lo - s.begin, hi - lo, piece.data + (lo - b));
    covered += hi - lo;
  }
  ZT_CHECK(covered == piece.slice.count, dir_, ": the checkpoint holds ", covered, " of the ", piece.slice.count,
           " values of ", piece.slot, " of ", quote(piece.tensor), " from element ", b,
           " that this run needs; it is incomplete");
}

const nlohmann::json* CheckpointReader::find_json(const std::string& key) const {
  const nlohmann::json::json_pointer ptr(JsonStateWriter::json_pointer(key));
  return state_.contains(ptr) ? &state_.at(ptr) : nullptr;
}

void CheckpointReader::load(const std::vector<Stateful*>& components) {
  for (Stateful* c : components) c->load_state(*this);
}

}  // namespace zt
