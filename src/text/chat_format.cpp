// chat_format.cpp: see chat_format.h.
#include "text/chat_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zt {
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZT_CHECK(f, "cannot read ", path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A special token in tokenizer_config.json: a string, an AddedToken object, or null.
bool token_text(const nlohmann::json& cfg, const char* key, std::string* out) {
  if (!cfg.contains(key) || cfg[key].is_null()) return false;
  const nlohmann::json& t = cfg[key];
  if (t.is_string())
    *out = t.get<std::string>();
  else if (t.is_object() && t.contains("content") && t["content"].is_string())
    *out = t["content"].get<std::string>();
  else
    return false;
  return true;
}

void read_config(const std::string& path, ChatTemplateConfig* c, bool want_template) {
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(path, ": not valid JSON (", e.what(), ")"));
  }
  c->has_bos = token_text(cfg, "bos_token", &c->bos_token);
  c->has_eos = token_text(cfg, "eos_token", &c->eos_token);
  if (!want_template || !cfg.contains("chat_template") || cfg["chat_template"].is_null()) return;
  const nlohmann::json& t = cfg["chat_template"];
  if (t.is_string()) {
    c->source = t.get<std::string>();
  } else if (t.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (auto& e : t)
      if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
          e["template"].is_string())
        c->source = e["template"].get<std::string>();
    ZT_CHECK(!c->source.empty(), path, ": chat_template is a list without a \"default\" template");
  } else {
    throw Error(str_cat(path, ": chat_template must be a string or a list of {name, template}"));
  }
  c->origin = path;
}

const char* kAlpacaWithInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
    "response that appropriately completes the request.\n\n### Instruction:\n";
const char* kAlpacaNoInput =
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n### Instruction:\n";

}  // namespace

ChatTemplateConfig chat_template_load(const std::string& tokenizer_dir, const std::string& template_path) {
  ChatTemplateConfig c;
  std::error_code ec;
  fs::path dir = tokenizer_dir;
  if (!tokenizer_dir.empty() && !fs::is_directory(dir, ec)) dir = dir.parent_path();
  const fs::path cfg = dir / "tokenizer_config.json";
  if (!tokenizer_dir.empty() && fs::exists(cfg, ec)) read_config(cfg.string(), &c, template_path.empty());
  if (!template_path.empty()) {
    ZT_CHECK(fs::is_regular_file(template_path, ec), "--chat_template_path ", template_path,
             " is not a file; give a .jinja template or a tokenizer_config.json");
    if (fs::path(template_path).extension() == ".json") {
      ChatTemplateConfig t;
      read_config(template_path, &t, true);
      ZT_CHECK(!t.source.empty(), template_path, " has no chat_template");
      c.source = t.source;
      c.origin = template_path;
    } else {
      c.source = read_file(template_path);
      c.origin = template_path;
    }
  }
  return c;
}

ChatFormatter::ChatFormatter(const ChatTemplateConfig& cfg, const SftOptions& opt, std::string eos_fallback)
    : cfg_(cfg), opt_(opt), eos_(cfg.has_eos ? cfg.eos_token : std::move(eos_fallback)) {
  if (!cfg_.source.empty()) tpl_ = std::make_unique<jinja::Template>(cfg_.source, cfg_.origin);
}

std::string ChatFormatter::render(const jinja::Value& messages, bool add_generation_prompt, const jinja::Value& extra,
                                  std::vector<jinja::Template::Span>* spans) const {
  jinja::Value ctx = jinja::Value::object();
  ctx.o->set("messages", messages);
  ctx.o->set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  ctx.o->set("bos_token", cfg_.has_bos ? jinja::Value::string(cfg_.bos_token) : jinja::Value::none());
  ctx.o->set("eos_token", cfg_.has_eos ? jinja::Value::string(cfg_.eos_token) : jinja::Value::none());
  if (extra.kind == jinja::Value::Kind::object)
    for (auto& kv : extra.o->items) ctx.o->set(kv.first, kv.second);
  return tpl_->render(ctx, spans, opt_.template_limits);
}

static void check_messages(const nlohmann::ordered_json& msgs, const char* field) {
  ZT_CHECK(msgs.is_array() && !msgs.empty(), "\"", field, "\" must be a non-empty list of {\"role\", \"content\"}");
  for (size_t i = 0; i < msgs.size(); ++i)
    ZT_CHECK(msgs[i].is_object() && msgs[i].contains("role") && msgs[i]["role"].is_string(), "\"", field, "\"[", i,
             "] is not an object with a string \"role\"");
}

static jinja::Value slice_messages(const jinja::Value& all, size_t n) {
  return jinja::Value::array(jinja::Array(all.a->begin(), all.a->begin() + long(n)));
}

SftText ChatFormatter::messages_record(const nlohmann::ordered_json& msgs, const jinja::Value& extra) const {
  check_messages(msgs, "messages");
  ZT_CHECK(tpl_,
           "the record is conversational (\"messages\") but the tokenizer has no chat_template; give "
           "--chat_template_path (a .jinja file or a tokenizer_config.json)");
  const jinja::Value all = jinja::from_json(msgs);
  std::vector<jinja::Template::Span> spans;
  const std::string full = render(all, false, extra, opt_.assistant_only_loss ? &spans : nullptr);
  SftText out;
  if (!opt_.assistant_only_loss) {
    out.pieces.push_back({full, true});
    return out;
  }
  if (!tpl_->has_generation()) {  // incremental rendering (chat_format.h)
    spans.clear();
    for (size_t i = 0; i < msgs.size(); ++i) {
      if (msgs[i]["role"] != "assistant") continue;
      const std::string p = render(slice_messages(all, i), true, extra);
      const std::string r = render(slice_messages(all, i + 1), false, extra);
      ZT_CHECK(full.compare(0, p.size(), p) == 0 && full.compare(0, r.size(), r) == 0 && r.size() >= p.size(),
               "--assistant_only_loss: the chat template renders messages[", i,
               "] (assistant) differently once later messages follow, so its tokens cannot be found by rendering "
               "turn by turn; use a template with {% generation %} markers (--chat_template_path) or train on "
               "every token (--assistant_only_loss false)");
      spans.push_back({p.size(), r.size()});
    }
  }
  ZT_CHECK(!spans.empty(), "--assistant_only_loss: the conversation has no assistant turn to train on");
  size_t at = 0;
  for (const auto& s : spans) {
    if (s.begin > at) out.pieces.push_back({full.substr(at, s.begin - at), false});
    if (s.end > std::max(at, s.begin))
      out.pieces.push_back({full.substr(std::max(at, s.begin), s.end - std::max(at, s.begin)), true});
    at = std::max(at, s.end);
  }
  if (at < full.size()) out.pieces.push_back({full.substr(at), false});
  return out;
}

SftText ChatFormatter::prompt_completion(const nlohmann::ordered_json& prompt, const nlohmann::ordered_json& completion,
                                         const jinja::Value& extra) const {
  SftText out;
  const bool trained_prompt = !opt_.completion_only_loss;
  if (prompt.is_string() && completion.is_string()) {
    std::string c = completion.get<std::string>();
    if (c.size() < eos_.size() || c.compare(c.size() - eos_.size(), eos_.size(), eos_) != 0) c += eos_;
    out.pieces.push_back({prompt.get<std::string>(), trained_prompt});
    out.pieces.push_back({c, true});
    return out;
  }
  ZT_CHECK(prompt.is_array() && completion.is_array(),
           "\"prompt\" and \"completion\" must both be strings or both be lists of messages");
  check_messages(prompt, "prompt");
  check_messages(completion, "completion");
  ZT_CHECK(tpl_,
           "the record is conversational (\"prompt\" / \"completion\" messages) but the tokenizer has no "
           "chat_template; give --chat_template_path (a .jinja file or a tokenizer_config.json)");
  nlohmann::ordered_json both = prompt;
  for (auto& m : completion) both.push_back(m);
  const std::string p = render(jinja::from_json(prompt), true, extra);
  const std::string full = render(jinja::from_json(both), false, extra);
  ZT_CHECK(full.compare(0, p.size(), p) == 0,
           "the chat template's rendering of \"prompt\" (with the generation prompt) is not the start of its "
           "rendering of prompt + completion, so the completion cannot be located");
  out.pieces.push_back({p, trained_prompt});
  out.pieces.push_back({full.substr(p.size()), true});
  return out;
}

SftText ChatFormatter::format(const nlohmann::ordered_json& r) const {
  ZT_CHECK(r.is_object(), "a record must be a JSON object");
  jinja::Value extra = jinja::Value::object();
  if (r.contains("tools") && !r["tools"].is_null()) {
    nlohmann::ordered_json tools = r["tools"];
    if (tools.is_string()) {
      try {
        tools = nlohmann::ordered_json::parse(tools.get<std::string>());
      } catch (const nlohmann::json::exception&) {
        throw Error("\"tools\" is a string that is not JSON (give a list of tool schemas, or one encoded as JSON)");
      }
    }
    if (!tools.empty()) extra.o->set("tools", jinja::from_json(tools));  // TRL: tools or None
  }
  if (r.contains("chat_template_kwargs") && r["chat_template_kwargs"].is_object())
    for (auto it = r["chat_template_kwargs"].begin(); it != r["chat_template_kwargs"].end(); ++it)
      extra.o->set(it.key(), jinja::from_json(it.value()));
  if (r.contains("messages")) return messages_record(r["messages"], extra);
  if (r.contains("prompt") && r.contains("completion")) return prompt_completion(r["prompt"], r["completion"], extra);
  if (r.contains("instruction") && r.contains("output")) {
    ZT_CHECK(r["instruction"].is_string() && r["output"].is_string() &&
                 (!r.contains("input") || r["input"].is_string() || r["input"].is_null()),
             "Alpaca fields \"instruction\", \"input\", \"output\" must be strings");
    const std::string ins = r["instruction"], output = r["output"];
    const std::string input = r.contains("input") && r["input"].is_string() ? r["input"].get<std::string>() : "";
    if (tpl_) {
      const std::string user = input.empty() ? ins : ins + "\n\n" + input;
      nlohmann::ordered_json p = nlohmann::ordered_json::array({{{"role", "user"}, {"content", user}}});
      nlohmann::ordered_json c = nlohmann::ordered_json::array({{{"role", "assistant"}, {"content", output}}});
      return prompt_completion(p, c, extra);
    }
    const std::string prompt = input.empty()
                                   ? kAlpacaNoInput + ins + "\n\n### Response:\n"
                                   : kAlpacaWithInput + ins + "\n\n### Input:\n" + input + "\n\n### Response:\n";
    return prompt_completion(prompt, output, extra);
  }
  std::string keys;
  for (auto it = r.begin(); it != r.end(); ++it) keys += (keys.empty() ? "" : ", ") + quote(it.key());
  throw Error(
      str_cat("the record has none of the fields \"messages\", \"prompt\" + \"completion\", or \"instruction\" "
              "+ \"output\" (its keys: ",
              keys.empty() ? "none" : keys, ")"));
}

}  // namespace zt
