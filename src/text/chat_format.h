// chat_format.h: one JSONL record of supervised fine-tuning data to the text the model trains
// on and the byte ranges of it that carry loss, the way TRL's SFTTrainer prepares them:
//   {"messages": [{role, content}, ...]}           conversational language modeling: the
//       chat template over the whole conversation; loss on every token, or with
//       assistant_only_loss on the assistant turns only.
//   {"prompt": ..., "completion": ...}             prompt-completion: strings (plain text,
//       EOS appended to the completion as TRL does) or message lists (the chat template over
//       prompt with add_generation_prompt, then over prompt + completion); with
//       completion_only_loss (TRL's default for this shape) loss on the completion only.
//   {"instruction", "input" (optional), "output"}  Alpaca: a conversational prompt-completion
//       (user: instruction + "\n\n" + input; assistant: output) when a chat template is known,
//       else the Stanford Alpaca prompt text as a plain prompt-completion.
// Assistant spans: from the template's {% generation %} markers when it has them (HF's
// return_assistant_tokens_mask), else by rendering incrementally: assistant turn i spans from
// the end of render(messages[:i], add_generation_prompt=True) to the end of
// render(messages[:i+1]); both must be prefixes of the whole conversation's text, else the
// record is refused (the template rewrites earlier turns, as Qwen3 does with reasoning).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/jinja.h"

namespace zt {

// The chat template and the special-token strings a template sees (bos_token, eos_token),
// from a tokenizer folder's tokenizer_config.json or an explicit file.
struct ChatTemplateConfig {
  std::string source;  // "" = the tokenizer has no chat template
  std::string origin;  // the file it came from, for messages
  std::string bos_token, eos_token;
  bool has_bos = false, has_eos = false;
};

// Reads tokenizer_config.json in `tokenizer_dir` (a folder; a file's folder) if present;
// `template_path` (TRL's chat_template_path: a .jinja file or a tokenizer_config.json) wins
// over its chat_template. A named chat template list picks "default".
ChatTemplateConfig chat_template_load(const std::string& tokenizer_dir, const std::string& template_path);

struct SftOptions {
  bool completion_only_loss = true;  // TRL's completion_only_loss (prompt-completion records)
  bool assistant_only_loss = false;  // TRL's assistant_only_loss (messages records)
  jinja::Limits template_limits;     // each render's budget (max_steps: --chat_template_max_steps)
};

// What a record becomes before tokenization: text pieces in order, each trained or not.
struct SftText {
  struct Piece {
    std::string text;
    bool trained;
  };
  std::vector<Piece> pieces;
};

class ChatFormatter {
 public:
  // eos_fallback: the EOS text for plain completions when the config names none.
  ChatFormatter(const ChatTemplateConfig& cfg, const SftOptions& opt, std::string eos_fallback);
  // One record; throws zt::Error (without a location: the caller adds file and line).
  SftText format(const nlohmann::ordered_json& record) const;
  bool has_template() const { return tpl_ != nullptr; }

 private:
  std::string render(const jinja::Value& messages, bool add_generation_prompt, const jinja::Value& extra,
                     std::vector<jinja::Template::Span>* spans = nullptr) const;
  SftText messages_record(const nlohmann::ordered_json& msgs, const jinja::Value& extra) const;
  SftText prompt_completion(const nlohmann::ordered_json& prompt, const nlohmann::ordered_json& completion,
                            const jinja::Value& extra) const;
  ChatTemplateConfig cfg_;
  SftOptions opt_;
  std::string eos_;
  std::unique_ptr<jinja::Template> tpl_;
};

}  // namespace zt
