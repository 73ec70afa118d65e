// hf_model.cpp: see hf_model.h.
#include "checkpoint/hf_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace zt {
namespace fs = std::filesystem;

// The weight files of a folder, opened, and where each tensor lives. Outside the anonymous
// namespace because HfWeights::Impl holds one (a unity build would warn, -Wsubobject-linkage).
struct HfWeightSet {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;  // sharded: tensor -> file; empty: one file
  std::string source;                                   // for messages
  const StEntry* find(const std::string& name) const {
    if (where.empty()) return files.front()->find(name);
    auto it = where.find(name);
    return it == where.end() ? nullptr : it->second->find(name);
  }
};

namespace {
using WeightSet = HfWeightSet;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

WeightSet open_index(const fs::path& dir) {
  const fs::path index = dir / kHfWeightsIndex;
  WeightSet w;
  w.source = index.string();
  std::ifstream f(index);
  ZT_CHECK(f.good(), "cannot open ", w.source);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  ZT_CHECK(!j.is_discarded() && j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), w.source,
           ": not a safetensors index (expected a JSON object with a \"weight_map\" object)");
  // Every file first: a missing shard is named before anything is read.
  std::map<std::string, const SafetensorsFile*> opened;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    ZT_CHECK(it.value().is_string(), w.source, ": weight_map[", quote(it.key()), "] must be a file name");
    const std::string file = it.value().get<std::string>();
    ZT_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", w.source,
             ": weight_map[", quote(it.key()), "] = ", quote(file), " is not a file name in the folder");
    if (opened.count(file)) continue;
    ZT_CHECK(is_file(dir / file), w.source, " lists ", quote(file), " (for tensor ", quote(it.key()),
             ") but that file is missing; download every shard the index names");
    w.files.push_back(std::make_unique<SafetensorsFile>((dir / file).string()));
    opened[file] = w.files.back().get();
  }
  ZT_CHECK(!w.files.empty(), w.source, ": the weight_map is empty");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const SafetensorsFile* file = opened[it.value().get<std::string>()];
    ZT_CHECK(file->find(it.key()), w.source, " places tensor ", quote(it.key()), " in ",
             quote(it.value().get<std::string>()), ", which does not hold it; the index and the shards disagree");
    w.where[it.key()] = file;
  }
  return w;
}

WeightSet open_weights(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) {  // a .safetensors file named directly
    WeightSet w;
    w.source = path;
    w.files.push_back(std::make_unique<SafetensorsFile>(path));
    return w;
  }
  // transformers' order: the single file first, then the index.
  if (is_file(p / kHfWeights)) return open_weights((p / kHfWeights).string());
  if (is_file(p / kHfWeightsIndex)) return open_index(p);
  throw Error(str_cat(path, ": no ", kHfWeights, " and no ", kHfWeightsIndex,
                      "; the model folder needs its weights (a single file or the shards and their index)"));
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

struct HfWeights::Impl {
  WeightSet w;
  ModelConfig cfg;
};

HfWeights::HfWeights(const std::string& path, const ModelConfig& cfg)
    : impl_(std::make_unique<Impl>(Impl{open_weights(path), cfg})) {}
HfWeights::~HfWeights() = default;

namespace {
// Phi3Attention's qkv_proj: q, k, v stacked; Phi3MLP's gate_up_proj: gate, then up.
struct FusedPart {
  const char *part, *whole;
  int64_t row, rows, whole_rows;
};
std::vector<FusedPart> fused_parts(const ModelConfig& cfg) {
  if (cfg.model_type != "phi3") return {};
  const int64_t q = int64_t(cfg.n_head) * cfg.head_size, kv = int64_t(cfg.n_kv_head) * cfg.head_size, f = cfg.ffn;
  return {{".self_attn.q_proj.weight", ".self_attn.qkv_proj.weight", 0, q, q + 2 * kv},
          {".self_attn.k_proj.weight", ".self_attn.qkv_proj.weight", q, kv, q + 2 * kv},
          {".self_attn.v_proj.weight", ".self_attn.qkv_proj.weight", q + kv, kv, q + 2 * kv},
          {".mlp.gate_proj.weight", ".mlp.gate_up_proj.weight", 0, f, 2 * f},
          {".mlp.up_proj.weight", ".mlp.gate_up_proj.weight", f, f, 2 * f}};
}

bool ends_with(const std::string& s, const char* tail, size_t* head) {
  const size_t n = std::strlen(tail);
  if (s.size() < n || s.compare(s.size() - n, n, tail) != 0) return false;
  *head = s.size() - n;
  return true;
}
}  // namespace

HfStored hf_stored(const ModelConfig& cfg, const std::string& name, const std::vector<int64_t>& shape) {
  HfStored st{name, 0, shape};
  if (shape.size() != 2) return st;
  size_t head = 0;
  for (const FusedPart& f : fused_parts(cfg)) {
    if (!ends_with(name, f.part, &head)) continue;
    st.name = name.substr(0, head) + f.whole;
    st.row = f.row;
    st.shape = {f.whole_rows, shape[1]};
  }
  return st;
}

std::vector<HfStored> hf_parts(const ModelConfig& cfg, const std::string& name, const std::vector<int64_t>& shape) {
  std::vector<HfStored> out;
  size_t head = 0;
  for (const FusedPart& f : fused_parts(cfg))
    if (shape.size() == 2 && shape[0] == f.whole_rows && ends_with(name, f.whole, &head))
      out.push_back({name.substr(0, head) + f.part, f.row, {f.rows, shape[1]}});
  return out;
}

void HfWeights::read(const ParamTable& table, int64_t begin, int64_t n, float* dst) const {
  const WeightSet& w = impl_->w;
  const ModelConfig& cfg = impl_->cfg;
  const int64_t end = begin + n;
  for (const ParamInfo& p : table.list()) {
    const int64_t lo = std::max(begin, p.offset) - p.offset, hi = std::min(end, p.offset + p.numel) - p.offset;
    if (lo >= hi) continue;
    HfStored st = hf_stored(cfg, p.name, p.global_shape);
    const StEntry* e = w.find(st.name);
    // ztrain's checkpoints before they stored fused tensors kept the parts under their own names.
    if (!e && st.name != p.name && (e = w.find(p.name))) st = {p.name, 0, p.global_shape};
    // GPT2Model checkpoints (e.g. the original "gpt2" upload) omit the "transformer." prefix.
    if (!e && p.name.rfind("transformer.", 0) == 0) e = w.find(p.name.substr(12));
    ZT_CHECK(e, w.source, ": tensor \"", st.name, "\" is missing; the weights do not match config.json (",
             cfg.arch_name(), ", ", cfg.n_layer, " layers)");
    ZT_CHECK(e->shape == st.shape, w.source, ": tensor \"", st.name, "\" has shape ", nlohmann::json(e->shape).dump(),
             " but config.json implies ", nlohmann::json(st.shape).dump());
    const SafetensorsFile& f = w.where.empty() ? *w.files.front() : *w.where.at(e->name);
    const int64_t at = st.row * (p.global_shape.size() > 1 ? p.global_shape[1] : 1);  // our first element in it
    float* out = dst + (p.offset + lo - begin);                                       // local element lo
    if (p.split == Split::none) {
      f.read_f32(*e, out, at + lo, hi - lo);
      continue;
    }
    // A tensor-parallel slice: its runs of the global tensor (vocabulary padding stays zero).
    std::fill_n(out, hi - lo, 0.f);
    for_each_slice_run(p, p.split_offset, [&](int64_t g, int64_t l, int64_t cnt) {
      const int64_t a = std::max(lo, l), b = std::min(hi, l + cnt);
      if (a < b) f.read_f32(*e, out + (a - lo), at + g + (a - l), b - a);
    });
  }
}

void hf_load_weights(Transformer& model, const std::string& path) {
  HfWeights(path, model.config()).read(model.params(), 0, model.num_params(), model.flat_params().as<float>());
}

void hf_check_weights(const std::string& path) { open_weights(path); }

std::string hf_weights_file(const std::string& folder) {
  const fs::path p(folder);
  if (is_file(p / kHfWeights)) return (p / kHfWeights).string();
  if (is_file(p / kHfWeightsIndex)) return (p / kHfWeightsIndex).string();
  return "";
}

int64_t hf_parse_size(const std::string& text, const std::string& flag) {
  // digits, optional spaces, an optional unit: K/M/G/T then B (decimal, bytes), b (bits), iB (binary)
  static const std::regex re(R"(^\s*([0-9]+)\s*(([kKmMgGtT])([iI]?)([bB]))?\s*$)");
  std::smatch m;
  const std::string hint =
      " is not a size; use bytes or a number with a unit, e.g. 50MB, 2GB, 500MiB (as "
      "save_pretrained's max_shard_size)";
  ZT_CHECK(std::regex_match(text, m, re), flag, " ", quote(text), hint);
  ZT_CHECK(m[1].length() <= 15, flag, " ", quote(text), " is too large");
  const long double n = std::stold(m[1].str());
  long double bytes = n;
  if (m[2].matched) {
    const int power = std::string("kmgt").find(char(std::tolower(m[3].str()[0]))) + 1;
    const bool binary = m[4].length() > 0, bits = !binary && m[5].str() == "b";
    long double unit = 1;
    for (int i = 0; i < power; ++i) unit *= binary ? 1024.0L : 1000.0L;
    bytes = n * unit / (bits ? 8 : 1);
  }
  ZT_CHECK(bytes >= 1 && bytes <= 1e18L, flag, " ", quote(text), " must be between 1 byte and 1 EB");
  return int64_t(bytes);
}

void hf_save_model(const Transformer& model, const std::string& folder, DType dtype, int64_t max_shard_bytes) {
  const float* P = model.flat_params().as<const float>();
  std::vector<float> host;  // a model on the GPU is written from a host copy of its parameters
  if (model.device() == DeviceKind::cuda) {
    host.resize(size_t(model.num_params()));
    copy_to_host(host.data(), P, host.size() * sizeof(float));
    P = host.data();
  }
  std::vector<StTensorOut> tensors;
  for (const ParamInfo& p : model.params().list()) tensors.push_back({p.name, p.shape, P + p.offset});
  hf_save_tensors(model.config(), tensors, folder, dtype, max_shard_bytes);
}

std::vector<std::vector<size_t>> hf_shard_plan(const std::vector<int64_t>& bytes, int64_t max_shard_bytes) {
  // huggingface_hub's split_state_dict_into_shards: tensors in order; one larger than the limit
  // is a shard alone (listed before the shard still filling), one that would tip the current
  // shard over closes it first.
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes[i] > max_shard_bytes && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes[i];
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::vector<StTensorOut> hf_fuse_tensors(const ModelConfig& cfg, const std::vector<StTensorOut>& tensors, bool strict,
                                         std::vector<size_t>* counts) {
  std::vector<StTensorOut> out;
  if (counts) counts->clear();
  auto keep = [&](size_t i) {
    out.push_back(tensors[i]);
    if (counts) counts->push_back(1);
  };
  for (size_t i = 0; i < tensors.size();) {
    const HfStored st = hf_stored(cfg, tensors[i].name, tensors[i].shape);
    if (st.name == tensors[i].name) {
      keep(i++);
      continue;
    }
    size_t e = i;
    int64_t rows = 0;
    bool contiguous = true, in_order = true;
    std::vector<int64_t> numel;
    for (; e < tensors.size(); ++e) {
      const HfStored se = hf_stored(cfg, tensors[e].name, tensors[e].shape);
      if (se.name != st.name) break;
      in_order = in_order && se.row == rows;
      numel.push_back(tensors[e].shape[0] * tensors[e].shape[1]);
      rows += tensors[e].shape[0];
      contiguous =
          contiguous && tensors[e].data && (e == i || tensors[e].data == tensors[e - 1].data + numel[numel.size() - 2]);
    }
    if (rows != st.shape[0] || !in_order) {
      ZT_CHECK(!strict, "saving ", st.name, ": its parts hold ", rows, " of ", st.shape[0],
               " rows (a bug in the layout)");
      while (i < e) keep(i++);
      continue;
    }
    std::vector<StTensorOut> parts(tensors.begin() + int64_t(i), tensors.begin() + int64_t(e));
    StTensorOut f{st.name, st.shape, contiguous ? tensors[i].data : nullptr};
    if (!contiguous)
      f.fill = [parts, numel](float* dst) {
        for (size_t k = 0; k < parts.size(); dst += numel[k++])
          if (parts[k].data)
            std::memcpy(dst, parts[k].data, size_t(numel[k]) * sizeof(float));
          else
            parts[k].fill(dst);
      };
    out.push_back(std::move(f));
    if (counts) counts->push_back(e - i);
    i = e;
  }
  return out;
}

void hf_save_tensors(const ModelConfig& cfg, const std::vector<StTensorOut>& parts, const std::string& folder,
                     DType dtype, int64_t max_shard_bytes) {
  const std::vector<StTensorOut> tensors = hf_fuse_tensors(cfg, parts, true);
  ::mkdir(folder.c_str(), 0755);
  const fs::path dir(folder);
  const int64_t es = int64_t(dtype_size(dtype));
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const StTensorOut& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    sizes.push_back(numel * es);
    total += numel * es;
  }
  std::vector<std::vector<StTensorOut>> shards;
  for (const std::vector<size_t>& plan : hf_shard_plan(sizes, max_shard_bytes)) {
    shards.emplace_back();
    for (size_t i : plan) shards.back().push_back(tensors[i]);
  }
  std::vector<std::string> written;
  if (shards.size() <= 1) {
    safetensors_write((dir / kHfWeights).string(), shards.empty() ? std::vector<StTensorOut>{} : shards[0], dtype,
                      {{"format", "pt"}});
    written.push_back(kHfWeights);
  } else {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shard_name(i, shards.size());
      safetensors_write((dir / name).string(), shards[i], dtype, {{"format", "pt"}});
      written.push_back(name);
      for (const StTensorOut& t : shards[i]) map[t.name] = name;
    }
    // The index last: until it exists the new shards are not a model a loader would pick.
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    write_file_atomic((dir / kHfWeightsIndex).string(), index.dump(2) + "\n");
    written.push_back(kHfWeightsIndex);
  }
  nlohmann::json cj = config_to_json(cfg, dtype_name(dtype));
  write_file_atomic((dir / "config.json").string(), cj.dump(2) + "\n");
  // An earlier save's other layout (a single file beside new shards would win over them).
  static const std::regex stale(R"(model(-[0-9]{5}-of-[0-9]{5})?\.safetensors(\.index\.json)?)");
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, stale) && std::find(written.begin(), written.end(), name) == written.end())
      fs::remove(e.path(), ec);
  }
}

HfSideFiles hf_side_files(const std::string& folder) {
  // (spiece.model, sentencepiece.bpe.model: T5's and XLM-R's names for a SentencePiece model.)
  static const char* names[] = {"tokenizer.json",
                                "tokenizer_config.json",
                                "special_tokens_map.json",
                                "added_tokens.json",
                                "tokenizer.model",
                                "spiece.model",
                                "sentencepiece.bpe.model",
                                "vocab.json",
                                "merges.txt",
                                "encoder.json",
                                "vocab.bpe",
                                "chat_template.jinja",
                                "generation_config.json"};
  HfSideFiles out;
  if (folder.empty()) return out;
  for (const char* n : names) {
    const fs::path p = fs::path(folder) / n;
    if (!is_file(p)) continue;
    std::ifstream f(p, std::ios::binary);
    ZT_CHECK(f.good(), "cannot read ", p.string());
    std::ostringstream s;
    s << f.rdbuf();
    out.emplace_back(n, s.str());
  }
  return out;
}

void hf_write_side_files(const std::string& folder, const HfSideFiles& files) {
  for (const auto& [name, bytes] : files) write_file_atomic((fs::path(folder) / name).string(), bytes);
}

}  // namespace zt
