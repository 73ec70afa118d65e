// task_eval.h: zero-shot multiple-choice scoring as lm-evaluation-harness defines it
// (--eval_tasks, `ztrain eval --tasks`) and probability probes (--eval_probes, `ztrain eval
// --probes`), both as log-likelihood requests run through the model's batched forward.
// It deliberately is not a port of the harness: one JSONL task format, no few-shot prompts, no
// generation tasks; only what the harness computes for a `multiple_choice` task (acc, acc_norm
// and their standard errors) and a probe's answer probability and first-token rank.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/transformer.h"
#include "text/tokenizer.h"

namespace zt {

// Bounds on the untrusted task and probe files: far above a hand-made or exported benchmark
// (MMLU's 14k questions), far below what would make memory or the tokenizer the problem.
struct EvalFileLimits {
  int64_t max_bytes = int64_t(64) << 20;
  int64_t max_lines = 200'000;
  int max_choices = 64;
};

// One scored continuation: the context and continuation tokens (encode_pair), where it came from.
struct LoglikRequest {
  std::vector<int32_t> context, continuation;
  std::string where;  // "FILE:LINE" for messages
};

// The harness's _encode_pair: trailing whitespace of the context moves to the front of the
// continuation; the continuation's tokens are those of encode(context + continuation) past the
// length of encode(context) (one whole-sequence encode, so a merge across the seam is kept as the
// harness keeps it); an empty context is [BOS], else [EOS] (the harness's prefix_token_id).
// Special tokens in the text are matched, as HF's tokenizer.encode(text, add_special_tokens=False).
LoglikRequest encode_pair(const Tokenizer& tok, const std::string& context, const std::string& continuation);

// What one request scored: the sum of its continuation tokens' log-probabilities and, when
// asked, the rank of its first continuation token among the vocabulary (1 = the likeliest).
struct LoglikScore {
  double loglik = 0;
  int64_t first_rank = 0;
};

// Each request is one row of (B, T), as the harness builds it: (context + continuation) cut to
// its last T + 1 tokens (long contexts lose their start), the inputs all but the last token, the
// continuation's positions the only counted targets; rows past the requests are padding. B rows
// go into each forward; the model must be planned for (B, T). A continuation longer than T is
// an error naming its request. Ranks need the CPU's whole-vocabulary LM head.
std::vector<LoglikScore> score_requests(Transformer& model, const std::vector<LoglikRequest>& reqs, int B, int T,
                                        bool ranks);

// The metrics of one evaluation, with what each question and probe scored.
struct TaskEvalResult {
  int64_t questions = 0;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;  // stderr NaN below 2 questions
  std::vector<std::vector<double>> logliks;                           // per question, per choice
  std::vector<int> pred, pred_norm;                                   // argmax of loglik, of loglik / length
  std::vector<double> probe_logprob, probe_prob;
  std::vector<int64_t> probe_rank;
  double mean_logprob = 0, mean_prob = 0, mean_rank = 0;
  double seconds = 0;
  // (key, value) for metrics.jsonl, trainer_state.json and TensorBoard: tasks/acc,
  // tasks/acc_stderr, tasks/acc_norm, tasks/acc_norm_stderr, tasks/questions; probe/<i>/prob,
  // probe/<i>/logprob, probe/<i>/rank and probe/mean_{prob,logprob,rank}.
  std::vector<std::pair<std::string, double>> metrics() const;
  // The summaries alone (the console line).
  std::vector<std::pair<std::string, double>> summary() const;
};

// The task and probe files, read and tokenized once; run() scores them at each evaluation.
class TaskEval {
 public:
  // tasks / probes: JSONL paths ("" = none). Every line of a task file is {"context": str,
  // "choices": [str, ...], "gold": int}, of a probe file {"prompt": str, "answer": str}; blank
  // lines are skipped. A bad line is one Error "FILE:LINE: what". Token ids must be < vocab.
  TaskEval(const Tokenizer& tok, const std::string& tasks, const std::string& probes, int vocab,
           const EvalFileLimits& limits = {});
  bool empty() const { return questions_.empty() && probes_.empty(); }
  bool has_probes() const { return !probes_.empty(); }
  // The longest row a request needs (context + continuation - 1 tokens): a T at least this long
  // truncates nothing.
  int longest_row() const { return longest_; }
  // Throws score_requests' error now (naming the request) when a continuation is longer than T:
  // a run checks at its start, not at its first evaluation.
  void check_fits(int T) const;
  // Every rank whose forward is a collective calls it alike (the work is deterministic).
  TaskEvalResult run(Transformer& model, int B, int T) const;

 private:
  struct Question {
    std::vector<LoglikRequest> choices;
    std::vector<double> length;  // the choice strings' lengths in characters (the harness's len())
    int gold = 0;
  };
  void read_tasks(const Tokenizer& tok, const std::string& path, int vocab, const EvalFileLimits& limits);
  void read_probes(const Tokenizer& tok, const std::string& path, int vocab, const EvalFileLimits& limits);
  void add_request(const LoglikRequest& r, int vocab);
  std::vector<Question> questions_;
  std::vector<LoglikRequest> probes_;
  int longest_ = 0;
};

}  // namespace zt
