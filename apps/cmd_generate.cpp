// cmd_generate.cpp: `ztrain generate` (KV-cache sampling from a model folder) and
// `ztrain eval` (loss and perplexity of a model on a token file; multiple-choice tasks and probes).
#include <omp.h>

#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_model.h"
#include "checkpoint/peft_files.h"
#include "commands.h"
#include "core/error.h"
#include "data/token_data.h"
#include "data/tokenize.h"
#include "flags.h"
#include "models/decoder.h"
#include "models/sampling.h"
#include "models/transformer.h"
#include "plan/memory_fit.h"
#include "text/tokenizer.h"
#include "core/file_io.h"
#include "observe/evaluate.h"
#include "observe/task_eval.h"

namespace zt::app {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The model of an HF folder, after checking that it fits in memory at batches of B x *T (*T <=
// 0: resolved here to min(1024, the model's context)).
// adapter: a PEFT LoRA folder merged into the weights (merge_and_unload), "" = none.
std::unique_ptr<Transformer> load_model(const std::string& dir, int B, int* T, const char* what, const char* hint,
                                        const std::string& adapter) {
  ZT_CHECK(!dir.empty(), "--model_name_or_path is required");
  ModelConfig cfg = config_from_file(dir + "/config.json");
  if (*T <= 0) *T = std::min(1024, cfg.max_position);
  // Before the parameters are allocated: a model beyond this machine is one clear error.
  parallel::check_memory_fits(parallel::inference_bytes(cfg, B, *T), 1, what, "", hint);
  auto m = std::make_unique<Transformer>(cfg);
  hf_load_weights(*m, dir);
  if (!adapter.empty()) peft_merge_into(*m, adapter);
  return m;
}

// The index of the first NaN or infinite value of x[0, n), -1 when all are finite.
int64_t first_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

// Whether the tokenizer turns id into text (an id below its vocab_size may be a hole).
bool decodable(const Tokenizer& tok, int32_t id) {
  try {
    tok.decode({id});
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The loss and perplexity over a token file, or over text tokenized first (into a private
// temporary folder, documents ending in EOS); printed and added to `out`.
void eval_loss(Transformer& model, const Tokenizer* tok, std::string file, const std::string& text_file,
               const std::string& text_field, bool split_special, int B, int T, int64_t max_samples,
               nlohmann::json* out) {
  std::string tmp_dir;
  if (!text_file.empty()) {
    char templ[] = "/tmp/ztrain-eval-XXXXXX";
    ZT_CHECK(::mkdtemp(templ) != nullptr, "cannot create a temporary folder in /tmp");
    tmp_dir = templ;
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } cleanup{tmp_dir};
  if (!text_file.empty()) {
    TokenizeConfig tc;
    tc.inputs = {text_file};
    tc.text_field = text_field;
    tc.split_special_tokens = split_special;
    tc.output_dir = tmp_dir;
    tc.validation_split_percentage = 0;
    tokenize_corpus(*tok, tc);
    file = tmp_dir + "/train.bin";
  }
  TokenFile data(file, model.config().vocab_size);
  if (!text_file.empty()) T = int(std::min<int64_t>(T, data.size() - 1));  // a short text is one window
  model.plan(B, T, false);
  EvalResult r = evaluate(model, data, B, T, max_samples);
  std::printf("***** eval metrics *****\n  %-24s = %.6f\n  %-24s = %.4f\n  %-24s = %lld\n  %-24s = %.3f\n", "eval_loss",
              r.loss, "perplexity", r.perplexity, "eval_tokens", (long long)r.tokens, "eval_runtime", r.seconds);
  *out = {{"eval_loss", r.loss}, {"perplexity", r.perplexity}, {"eval_tokens", r.tokens}, {"eval_runtime", r.seconds}};
}

}  // namespace

int cmd_generate(const Args& args) {
  std::string model_dir, tokenizer, prompt = "", adapter;
  int64_t max_new_tokens = 100, min_new_tokens = 0, seed = 42;
  int threads = 0;
  bool compare_full = false;
  bool split_special = false;  // a prompt's special tokens mean what they say, as in HF's tokenizer(prompt)
  SamplingConfig sc;
  FlagSet f("generate");
  f.add("model_name_or_path", &model_dir, "HF model folder");
  f.add("adapter_name_or_path", &adapter,
        "a PEFT adapter folder (LoRA or IA3) applied to the model (merged in; docs/peft.md)");
  f.add("tokenizer_name_or_path", &tokenizer, "tokenizer folder or tokenizer.json (default: the model folder)");
  f.add("prompt", &prompt, "text to continue");
  f.add("split_special_tokens", &split_special,
        "special added tokens in --prompt stay text; false = matched, as Hugging Face's tokenizer(prompt) does "
        "(false)");
  f.add("max_new_tokens", &max_new_tokens, "tokens to generate (100)", range::closed(1, limits::kMaxLength));
  f.add("min_new_tokens", &min_new_tokens, "EOS is not sampled before this many new tokens (0)",
        range::closed(0, limits::kMaxLength));
  f.add("temperature", &sc.temperature, "softmax temperature, 0 = greedy (1.0)", range::at_least(0));
  f.add("top_k", &sc.top_k, "sample among the k most likely, 0 = off (50)", range::closed(0, INT32_MAX));
  f.add("top_p", &sc.top_p, "nucleus sampling mass, 1 = off (1.0)", range::above(0, 1));
  f.add("seed", &seed, "sampling seed (42)", range::at_least(0));
  f.add("threads", &threads, "0 = all cores (0)", range::closed(0, limits::kMaxThreads));
  f.add("compare_full_forward", &compare_full, "also time a full forward per token at the final length");
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  ZT_CHECK(min_new_tokens <= max_new_tokens, "ztrain generate: --min_new_tokens ", min_new_tokens,
           " exceeds --max_new_tokens ", max_new_tokens, "; lower it or raise --max_new_tokens");
  if (threads > 0) omp_set_num_threads(threads);
  int one = 1;
  auto model = load_model(model_dir, 1, &one, "generating with this model", "use a smaller model", adapter);
  auto tok = Tokenizer::load(tokenizer.empty() ? model_dir : tokenizer);
  std::vector<int32_t> ids = tok->encode(prompt, {split_special, false});
  if (ids.empty()) ids.push_back(tok->bos_id() >= 0 ? tok->bos_id() : tok->eos_id());
  ZT_CHECK(ids[0] >= 0, "empty prompt and the tokenizer has no BOS/EOS token to start from; pass --prompt");
  const int total = int(ids.size() + size_t(max_new_tokens));
  ZT_CHECK(total <= model->config().max_position, "the prompt (", ids.size(), " tokens) plus --max_new_tokens ",
           max_new_tokens, " = ", total, " positions exceeds the model's context of ", model->config().max_position,
           " positions; lower --max_new_tokens or shorten the prompt");
  parallel::check_memory_fits(int64_t(model->flat_params().bytes()) + KvDecoder::cache_bytes(model->config(), total), 1,
                              "generating with this model and its KV cache", "",
                              "lower --max_new_tokens or use a smaller model");
  KvDecoder dec(*model, total);
  Rng rng(uint64_t(seed), 0x47454eull);
  const int V = model->config().vocab_size;
  // A model's vocabulary is often padded past its tokenizer's (Qwen2.5: 151,936 rows for 151,665
  // ids); those rows were never trained and no text decodes from them, so they are never sampled.
  const int V_tok = tok->vocab_size();
  ZT_CHECK(V_tok <= V, "the tokenizer has ", V_tok, " tokens but the model only ", V,
           "; pass the model's own tokenizer (--tokenizer_name_or_path)");
  auto t0 = Clock::now();
  const float* logits = nullptr;
  for (int32_t id : ids) logits = dec.step(id).as<const float>();
  const double prefill_s = since(t0);
  const size_t prompt_tokens = ids.size();
  auto t1 = Clock::now();
  int64_t made = 0;
  std::vector<float> masked;
  try {
    for (; made < max_new_tokens; ++made) {
      // NaN or inf logits mean broken weights or an overflow: sampling from them gives noise that
      // looks like text, so it stops here (what came before is printed; the exit is non-zero).
      const int64_t bad = first_non_finite(logits, V);
      ZT_CHECK(bad < 0, "generate: the model ", model_dir, " produced a non-finite logit (", logits[bad], " for id ",
               bad, ") at new token ", made + 1, "; its weights are damaged or overflow in fp32");
      const bool hold_eos = made < min_new_tokens && tok->eos_id() >= 0 && tok->eos_id() < V;
      const float* l = logits;
      if (hold_eos || V_tok < V) {
        masked.assign(logits, logits + V);
        std::fill(masked.begin() + V_tok, masked.end(), -std::numeric_limits<float>::infinity());
        // HF's min_new_tokens: EOS is masked out until that many tokens exist.
        if (hold_eos) masked[size_t(tok->eos_id())] = -std::numeric_limits<float>::infinity();
        l = masked.data();
      }
      int32_t next = sample_token(TensorView::of(l, {V}), sc, rng);
      // Ids below the tokenizer's vocab_size can still be holes (no token): masked as met.
      for (int tries = 0; !decodable(*tok, next); ++tries) {
        ZT_CHECK(tries < 1000,
                 "generate: the tokenizer decodes none of the model's likeliest ids; pass the model's "
                 "own tokenizer (--tokenizer_name_or_path)");
        if (l != masked.data()) masked.assign(l, l + V), l = masked.data();
        masked[size_t(next)] = -std::numeric_limits<float>::infinity();
        next = sample_token(TensorView::of(l, {V}), sc, rng);
      }
      if (next == tok->eos_id()) break;
      ids.push_back(next);
      if (made + 1 < max_new_tokens) logits = dec.step(next).as<const float>();
    }
  } catch (const Error&) {
    // The text so far is not lost: it goes to stdout before the one error line.
    if (ids.size() > prompt_tokens) std::printf("%s\n", tok->decode(ids).c_str());
    throw;
  }
  const double gen_s = since(t1);
  std::printf("%s\n", tok->decode(ids).c_str());
  const double tps = double(made) / gen_s;
  std::fprintf(stderr, "generate: %zu prompt tokens in %.3f s, %lld new tokens in %.3f s (%.1f tokens/s, KV cache)\n",
               ids.size() - size_t(made), prefill_s, (long long)made, gen_s, tps);
  if (compare_full) {
    // The cost a decoder without a cache pays per token at this length: one full forward.
    const int T = int(ids.size());
    model->plan(1, T, false);
    std::vector<int32_t> tg(ids.begin() + 1, ids.end());
    tg.push_back(0);
    int64_t c;
    model->forward_loss(ids.data(), tg.data(), &c);
    auto t2 = Clock::now();
    const int reps = 3;
    for (int r = 0; r < reps; ++r) model->forward_loss(ids.data(), tg.data(), &c);
    const double full_s = since(t2) / reps;
    std::fprintf(stderr,
                 "generate: a full forward at length %d takes %.3f s = %.1f tokens/s; KV cache speed-up %.1fx\n", T,
                 full_s, 1.0 / full_s, tps * full_s);
  }
  return 0;
}

namespace {

// --tasks / --probes: scored at a T that truncates none of them (at most --model_max_length);
// their metrics join the printed block and `out` (empty: no loss was printed before them).
void eval_tasks(Transformer& model, const TaskEval& te, int B, int T, nlohmann::json* out) {
  T = std::max(1, std::min(T, te.longest_row()));
  model.plan(B, T, false);
  const TaskEvalResult r = te.run(model, B, T);
  if (out->empty()) std::printf("***** eval metrics *****\n");  // not printed by the loss above
  for (const auto& [k, v] : r.summary()) {
    std::printf("  %-24s = %.6g\n", k.c_str(), v);
    (*out)[k] = v;
  }
  for (size_t i = 0; i < r.logliks.size(); ++i)
    (*out)["questions"].push_back({{"logliks", r.logliks[i]}, {"pred", r.pred[i]}, {"pred_norm", r.pred_norm[i]}});
  for (size_t i = 0; i < r.probe_prob.size(); ++i) {
    std::printf("  %-24s = prob %.6g, logprob %.6f, rank %lld\n", str_cat("probe/", i).c_str(), r.probe_prob[i],
                r.probe_logprob[i], (long long)r.probe_rank[i]);
    (*out)["probes"].push_back({{"prob", r.probe_prob[i]}, {"logprob", r.probe_logprob[i]}, {"rank", r.probe_rank[i]}});
  }
  std::printf("  %-24s = %.3f\n", "tasks_runtime", r.seconds);
  (*out)["tasks_runtime"] = r.seconds;
}

}  // namespace

int cmd_eval(const Args& args) {
  std::string model_dir, file, text_file, tokenizer, text_field = "text", tasks, probes, output_path, adapter;
  bool split_special = true;
  int B = 8, T = 0, threads = 0;
  int64_t max_samples = 0;
  FlagSet f("eval");
  f.add("model_name_or_path", &model_dir, "HF model folder");
  f.add("adapter_name_or_path", &adapter,
        "a PEFT adapter folder (LoRA or IA3) applied to the model (merged in; docs/peft.md)");
  f.add("validation_file", &file, "token file (ztrain shard or uint16 train.bin)");
  f.add("text_file", &text_file, "or text: a .txt / .jsonl file or a folder of them, tokenized first");
  f.add("tasks", &tasks,
        "multiple-choice JSONL ({\"context\", \"choices\", \"gold\"} per line): acc and acc_norm as "
        "lm-evaluation-harness scores them");
  f.add("probes", &probes, "probe JSONL ({\"prompt\", \"answer\"} per line): each answer's probability and rank");
  f.add("output_path", &output_path,
        "also write the metrics (and each question's and probe's scores) to this JSON file");
  f.add("tokenizer_name_or_path", &tokenizer,
        "tokenizer for --text_file, --tasks and --probes (default: the model folder)");
  f.add("text_field", &text_field, "JSONL field holding the text (text)");
  f.add("split_special_tokens", &split_special,
        "--text_file: special added tokens stay text, as in `ztrain tokenize` (true); false = matched as Hugging "
        "Face's tokenizer(text) does");
  f.add("per_device_eval_batch_size", &B, "sequences per batch (8)", range::closed(1, limits::kMaxBatch));
  f.add("model_max_length", &T, "sequence length (min(1024, model context))", range::closed(1, limits::kMaxLength));
  f.add("max_eval_samples", &max_samples, "sequences evaluated, 0 = all (0)", range::closed(0, limits::kMaxSteps));
  f.add("threads", &threads, "0 = all cores (0)", range::closed(0, limits::kMaxThreads));
  if (wants_help(args, f.help())) return 0;
  f.parse(args);
  const bool scored = !tasks.empty() || !probes.empty();
  ZT_CHECK(!(!file.empty() && !text_file.empty()), "give one of --validation_file (tokens) or --text_file (text)");
  ZT_CHECK(!file.empty() || !text_file.empty() || scored,
           "nothing to evaluate: give --validation_file (tokens), --text_file (text), --tasks or --probes");
  if (threads > 0) omp_set_num_threads(threads);
  auto model =
      load_model(model_dir, B, &T, "evaluating this model",
                 "use a smaller --per_device_eval_batch_size or --model_max_length, or a smaller model", adapter);
  std::unique_ptr<Tokenizer> tok;
  if (!text_file.empty() || scored) {
    tok = Tokenizer::load(tokenizer.empty() ? model_dir : tokenizer);
    ZT_CHECK(tok->vocab_size() <= model->config().vocab_size, "the tokenizer has ", tok->vocab_size(),
             " tokens but the model only ", model->config().vocab_size, "; pass the model's tokenizer");
  }
  // Read and checked before any evaluation runs: a bad line stops it at once.
  std::unique_ptr<TaskEval> te;
  if (scored) {
    te = std::make_unique<TaskEval>(*tok, tasks, probes, model->config().vocab_size);
    te->check_fits(T);
  }
  nlohmann::json out = nlohmann::json::object();
  if (!file.empty() || !text_file.empty())
    eval_loss(*model, tok.get(), file, text_file, text_field, split_special, B, T, max_samples, &out);
  if (te) eval_tasks(*model, *te, B, T, &out);
  std::fflush(stdout);
  if (!output_path.empty()) write_file_atomic(output_path, out.dump(2) + "\n");
  return 0;
}

}  // namespace zt::app
