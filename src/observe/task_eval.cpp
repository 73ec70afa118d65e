// task_eval.cpp: see task_eval.h.
#include "observe/task_eval.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/cross_entropy.h"

namespace zt {

namespace {

// Calls each(line number, text) for every non-blank line of a JSONL file, within the limits.
void for_each_line(const std::string& path, const char* flag, const EvalFileLimits& lim,
                   const std::function<void(int64_t, const std::string&)>& each) {
  struct stat st {};
  ZT_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), flag, " ", path,
           " is not a readable file; pass a JSONL file");
  ZT_CHECK(int64_t(st.st_size) <= lim.max_bytes, flag, " ", path, " has ", int64_t(st.st_size),
           " bytes, more than the ", lim.max_bytes, " an evaluation file may have; split it");
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), flag, " ", path, " cannot be opened");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int64_t line = 0, used = 0;
  for (size_t b = 0; b < text.size();) {
    const size_t e = std::min(text.find('\n', b), text.size());
    ++line;
    const std::string s = text.substr(b, e - b);
    b = e + 1;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    ZT_CHECK(++used <= lim.max_lines, path, ":", line, ": more than ", lim.max_lines,
             " entries, more than an evaluation file may have; split it");
    each(line, s);
  }
  ZT_CHECK(used > 0, flag, " ", path, " holds no entries; it needs one JSON object per line");
}

// The line as a JSON object, or an Error naming FILE:LINE.
nlohmann::json parse_object(const std::string& where, const std::string& s, const char* shape) {
  nlohmann::json j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  ZT_CHECK(!j.is_discarded(), where, ": not valid JSON; each line must be one object ", shape);
  ZT_CHECK(j.is_object(), where, ": not a JSON object; each line must be one object ", shape);
  return j;
}

const std::string& string_field(const nlohmann::json& j, const char* key, const std::string& where, const char* shape) {
  const auto it = j.find(key);
  ZT_CHECK(it != j.end(), where, ": no \"", key, "\" field; each line must be ", shape);
  ZT_CHECK(it->is_string(), where, ": \"", key, "\" must be a string; each line must be ", shape);
  return it->get_ref<const std::string&>();
}

// Python's len() of a UTF-8 string: its code points (bytes that do not continue a sequence).
double char_length(const std::string& s) {
  double n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// lm-eval's mean_stderr over 0/1 values: the sample standard deviation over sqrt(n).
double mean_stderr(double p, int64_t n) {
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  return std::sqrt(p * (1 - p) / double(n - 1));
}

void check_continuation(const LoglikRequest& q, int T) {
  ZT_CHECK(int64_t(q.continuation.size()) <= T, q.where, ": the continuation is ", q.continuation.size(),
           " tokens, more than the ", T, " positions evaluated; shorten it or raise --model_max_length");
}

// The first index of the largest value (numpy's argmax).
int argmax(const std::vector<double>& v) {
  int best = 0;
  for (int i = 1; i < int(v.size()); ++i)
    if (v[size_t(i)] > v[size_t(best)]) best = i;
  return best;
}

}  // namespace

LoglikRequest encode_pair(const Tokenizer& tok, const std::string& context, const std::string& continuation) {
  LoglikRequest r;
  const Tokenizer::EncodeOptions opt{/*split_special_tokens=*/false, /*add_special_tokens=*/false};
  // The harness's prefix token, so that the first continuation token has something to follow.
  auto prefix = [&] {
    const int32_t id = tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
    ZT_CHECK(id >= 0, "an empty context needs a BOS or EOS token to start from, and the tokenizer has neither");
    return std::vector<int32_t>{id};
  };
  if (context.empty()) {
    r.context = prefix();
    r.continuation = tok.encode(continuation, opt);
    return r;
  }
  const size_t keep = context.find_last_not_of(" \t\n\r\f\v") + 1;  // Python's rstrip(): npos + 1 = 0
  const std::string ctx = context.substr(0, keep);
  const std::string cont = context.substr(keep) + continuation;
  std::vector<int32_t> whole = tok.encode(ctx + cont, opt);
  r.context = tok.encode(ctx, opt);
  const size_t n = std::min(r.context.size(), whole.size());
  r.continuation.assign(whole.begin() + std::ptrdiff_t(n), whole.end());
  // A context of whitespace alone encodes to nothing once its spaces moved over (the harness would
  // then score the continuation's first token with no logits for it): the prefix token stands in.
  if (r.context.empty()) r.context = prefix();
  return r;
}

std::vector<LoglikScore> score_requests(Transformer& model, const std::vector<LoglikRequest>& reqs, int B, int T,
                                        bool ranks) {
  ZT_ASSERT(B > 0 && T > 0);
  const size_t N = size_t(B) * size_t(T);
  std::vector<int32_t> in(N), tg(N);
  std::vector<double> losses(N);
  std::vector<int64_t> rank(ranks ? N : 0);
  std::vector<LoglikScore> out(reqs.size());
  std::vector<int> first(B), last(B);  // each row's continuation targets [first, last)
  ModelRuntime& rt = model.runtime();
  double* kept_losses = rt.token_losses();  // the channel losses' buffer, if training set one
  rt.set_token_losses(losses.data());
  rt.set_token_ranks(ranks ? rank.data() : nullptr);
  try {
    for (size_t r0 = 0; r0 < reqs.size(); r0 += size_t(B)) {
      const int rows = int(std::min<size_t>(size_t(B), reqs.size() - r0));
      std::fill(in.begin(), in.end(), 0);
      std::fill(tg.begin(), tg.end(), kernels::kIgnoreIndex);
      for (int b = 0; b < rows; ++b) {
        const LoglikRequest& q = reqs[r0 + size_t(b)];
        check_continuation(q, T);
        const int cont = int(q.continuation.size());
        std::vector<int32_t> whole = q.context;
        whole.insert(whole.end(), q.continuation.begin(), q.continuation.end());
        const size_t drop = whole.size() > size_t(T) + 1 ? whole.size() - size_t(T) - 1 : 0;  // from the left
        const int m = int(whole.size() - drop) - 1;                                           // inputs
        int32_t* row_in = in.data() + size_t(b) * T;
        int32_t* row_tg = tg.data() + size_t(b) * T;
        std::copy_n(whole.begin() + std::ptrdiff_t(drop), m, row_in);
        for (int i = m - cont; i < m; ++i) row_tg[i] = whole[drop + size_t(i) + 1];
        first[size_t(b)] = m - cont;
        last[size_t(b)] = m;
      }
      int64_t count = 0;
      model.forward_loss(in.data(), tg.data(), &count);
      for (int b = 0; b < rows; ++b) {
        LoglikScore& s = out[r0 + size_t(b)];
        const size_t row = size_t(b) * T;
        for (int i = first[size_t(b)]; i < last[size_t(b)]; ++i) s.loglik -= losses[row + size_t(i)];
        if (ranks) s.first_rank = rank[row + size_t(first[size_t(b)])];
      }
    }
  } catch (...) {
    rt.set_token_losses(kept_losses);
    rt.set_token_ranks(nullptr);
    throw;
  }
  rt.set_token_losses(kept_losses);
  rt.set_token_ranks(nullptr);
  return out;
}

TaskEval::TaskEval(const Tokenizer& tok, const std::string& tasks, const std::string& probes, int vocab,
                   const EvalFileLimits& limits) {
  if (!tasks.empty()) read_tasks(tok, tasks, vocab, limits);
  if (!probes.empty()) read_probes(tok, probes, vocab, limits);
}

void TaskEval::add_request(const LoglikRequest& r, int vocab) {
  ZT_CHECK(!r.continuation.empty(), r.where, ": the continuation encodes to no tokens; it needs some text to score");
  for (const std::vector<int32_t>* ids : {&r.context, &r.continuation})
    for (int32_t id : *ids)
      ZT_CHECK(id >= 0 && id < vocab, r.where, ": the tokenizer produced id ", id,
               ", outside the model's vocabulary of ", vocab, "; use the model's own tokenizer");
  longest_ = std::max(longest_, int(r.context.size() + r.continuation.size()) - 1);
}

void TaskEval::check_fits(int T) const {
  const LoglikRequest* longest = nullptr;
  for (const Question& q : questions_)
    for (const LoglikRequest& r : q.choices)
      if (!longest || r.continuation.size() > longest->continuation.size()) longest = &r;
  for (const LoglikRequest& r : probes_)
    if (!longest || r.continuation.size() > longest->continuation.size()) longest = &r;
  if (longest) check_continuation(*longest, T);
}

void TaskEval::read_tasks(const Tokenizer& tok, const std::string& path, int vocab, const EvalFileLimits& lim) {
  const char* shape = R"({"context": str, "choices": [str, ...], "gold": int})";
  for_each_line(path, "--eval_tasks", lim, [&](int64_t line, const std::string& s) {
    const std::string where = str_cat(path, ":", line);
    const nlohmann::json j = parse_object(where, s, shape);
    const std::string& context = string_field(j, "context", where, shape);
    const auto ch = j.find("choices");
    ZT_CHECK(ch != j.end() && ch->is_array(), where, ": no \"choices\" list; each line must be ", shape);
    const int64_t n = int64_t(ch->size());
    ZT_CHECK(n >= 1 && n <= lim.max_choices, where, ": ", n, " choices; a question needs 1 to ", lim.max_choices);
    const auto g = j.find("gold");
    ZT_CHECK(g != j.end(), where, ": no \"gold\" field (the index of the right choice); each line must be ", shape);
    ZT_CHECK(g->is_number_integer(), where, ": \"gold\" must be an integer index into \"choices\"");
    const int64_t gold = g->get<int64_t>();
    ZT_CHECK(gold >= 0 && gold < n, where, ": \"gold\" is ", gold, ", outside the ", n, " choices (0 to ", n - 1, ")");
    Question q;
    q.gold = int(gold);
    for (int64_t c = 0; c < n; ++c) {
      const nlohmann::json& v = (*ch)[size_t(c)];
      ZT_CHECK(v.is_string(), where, ": choice ", c, " is not a string");
      const std::string& text = v.get_ref<const std::string&>();
      LoglikRequest r;
      try {
        r = encode_pair(tok, context, text);
      } catch (const Error& e) {
        throw Error(str_cat(where, ": ", e.what()));
      }
      r.where = str_cat(where, " (choice ", c, ")");
      add_request(r, vocab);
      q.choices.push_back(std::move(r));
      q.length.push_back(std::max(1.0, char_length(text)));  // "" never reaches here: it has no tokens
    }
    questions_.push_back(std::move(q));
  });
}

void TaskEval::read_probes(const Tokenizer& tok, const std::string& path, int vocab, const EvalFileLimits& lim) {
  const char* shape = R"({"prompt": str, "answer": str})";
  for_each_line(path, "--eval_probes", lim, [&](int64_t line, const std::string& s) {
    const std::string where = str_cat(path, ":", line);
    const nlohmann::json j = parse_object(where, s, shape);
    const std::string& prompt = string_field(j, "prompt", where, shape);
    const std::string& answer = string_field(j, "answer", where, shape);
    LoglikRequest r;
    try {
      r = encode_pair(tok, prompt, answer);
    } catch (const Error& e) {
      throw Error(str_cat(where, ": ", e.what()));
    }
    r.where = where;
    add_request(r, vocab);
    probes_.push_back(std::move(r));
  });
}

TaskEvalResult TaskEval::run(Transformer& model, int B, int T) const {
  const auto t0 = std::chrono::steady_clock::now();
  TaskEvalResult res;
  std::vector<LoglikRequest> reqs;
  for (const Question& q : questions_) reqs.insert(reqs.end(), q.choices.begin(), q.choices.end());
  const std::vector<LoglikScore> mc = score_requests(model, reqs, B, T, false);
  size_t k = 0;
  double hits = 0, hits_norm = 0;
  for (const Question& q : questions_) {
    std::vector<double> ll, norm;
    for (size_t c = 0; c < q.choices.size(); ++c, ++k) {
      ll.push_back(mc[k].loglik);
      norm.push_back(mc[k].loglik / q.length[c]);
    }
    res.pred.push_back(argmax(ll));
    res.pred_norm.push_back(argmax(norm));
    hits += res.pred.back() == q.gold;
    hits_norm += res.pred_norm.back() == q.gold;
    res.logliks.push_back(std::move(ll));
  }
  const int64_t n = int64_t(questions_.size());
  res.questions = n;
  if (n > 0) {
    res.acc = hits / double(n);
    res.acc_norm = hits_norm / double(n);
    res.acc_stderr = mean_stderr(res.acc, n);
    res.acc_norm_stderr = mean_stderr(res.acc_norm, n);
  }
  const std::vector<LoglikScore> pr = score_requests(model, probes_, B, T, true);
  for (const LoglikScore& s : pr) {
    res.probe_logprob.push_back(s.loglik);
    res.probe_prob.push_back(std::exp(s.loglik));
    res.probe_rank.push_back(s.first_rank);
    res.mean_logprob += s.loglik / double(pr.size());
    res.mean_prob += std::exp(s.loglik) / double(pr.size());
    res.mean_rank += double(s.first_rank) / double(pr.size());
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::vector<std::pair<std::string, double>> TaskEvalResult::summary() const {
  std::vector<std::pair<std::string, double>> m;
  if (questions > 0) {
    m.push_back({"tasks/acc", acc});
    m.push_back({"tasks/acc_stderr", acc_stderr});
    m.push_back({"tasks/acc_norm", acc_norm});
    m.push_back({"tasks/acc_norm_stderr", acc_norm_stderr});
    m.push_back({"tasks/questions", double(questions)});
  }
  if (!probe_prob.empty()) {
    m.push_back({"probe/mean_prob", mean_prob});
    m.push_back({"probe/mean_logprob", mean_logprob});
    m.push_back({"probe/mean_rank", mean_rank});
  }
  return m;
}

std::vector<std::pair<std::string, double>> TaskEvalResult::metrics() const {
  std::vector<std::pair<std::string, double>> m = summary();
  for (size_t i = 0; i < probe_prob.size(); ++i) {
    const std::string p = str_cat("probe/", i, "/");
    m.push_back({p + "prob", probe_prob[i]});
    m.push_back({p + "logprob", probe_logprob[i]});
    m.push_back({p + "rank", double(probe_rank[i])});
  }
  return m;
}

}  // namespace zt
