// pipeline_schedule.cpp: GPipe, 1F1B and interleaved 1F1B as action lists, their simulator,
// and the stage cut (see pipeline_schedule.h).
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace zt::parallel {

const char* schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::gpipe:
      return "gpipe";
    case PipeSchedule::one_f_one_b:
      return "1f1b";
    case PipeSchedule::interleaved:
      return "interleaved";
  }
  return "?";
}

PipeSchedule parse_schedule(const std::string& s) {
  if (s == "gpipe") return PipeSchedule::gpipe;
  if (s == "1f1b") return PipeSchedule::one_f_one_b;
  if (s == "interleaved") return PipeSchedule::interleaved;
  throw Error(str_cat("--pipeline_schedule ", quote(s), " is not one of gpipe, 1f1b, interleaved"));
}

const char* action_name(ActionKind k) {
  switch (k) {
    case ActionKind::recv_act:
      return "recv_act";
    case ActionKind::forward:
      return "forward";
    case ActionKind::send_act:
      return "send_act";
    case ActionKind::recv_grad:
      return "recv_grad";
    case ActionKind::backward:
      return "backward";
    case ActionKind::send_grad:
      return "send_grad";
  }
  return "?";
}

void check_schedule(const ScheduleSpec& s) {
  ZT_CHECK(s.stages >= 1, "pipeline stages must be >= 1, got ", s.stages);
  ZT_CHECK(s.microbatches >= 1, "pipeline micro-batches (--gradient_accumulation_steps) must be >= 1, got ",
           s.microbatches);
  ZT_CHECK(s.virtual_stages >= 1, "virtual pipeline stages must be >= 1, got ", s.virtual_stages);
  ZT_CHECK(s.virtual_stages == 1 || s.kind == PipeSchedule::interleaved, "virtual pipeline stages (", s.virtual_stages,
           ") need --pipeline_schedule interleaved, not ", schedule_name(s.kind));
  ZT_CHECK(s.kind != PipeSchedule::interleaved || s.microbatches % s.stages == 0,
           "the interleaved schedule needs the micro-batches (--gradient_accumulation_steps ", s.microbatches,
           ") to be a multiple of the pipeline stages (", s.stages,
           "), as Megatron-LM requires; use a multiple or --pipeline_schedule 1f1b");
}

namespace {

// One compute step with its communication, in the order the list holds them.
void add_forward(std::vector<Action>& out, const ScheduleSpec& s, int stage, int mb, int chunk) {
  const int vs = virtual_stage(stage, chunk, s.stages), last = s.stages * s.virtual_stages - 1;
  if (vs > 0) out.push_back({ActionKind::recv_act, mb, chunk});
  out.push_back({ActionKind::forward, mb, chunk});
  if (vs < last) out.push_back({ActionKind::send_act, mb, chunk});
}
void add_backward(std::vector<Action>& out, const ScheduleSpec& s, int stage, int mb, int chunk) {
  const int vs = virtual_stage(stage, chunk, s.stages), last = s.stages * s.virtual_stages - 1;
  if (vs < last) out.push_back({ActionKind::recv_grad, mb, chunk});
  out.push_back({ActionKind::backward, mb, chunk});
  if (vs > 0) out.push_back({ActionKind::send_grad, mb, chunk});
}

}  // namespace

std::vector<Action> make_schedule(const ScheduleSpec& s, int stage) {
  check_schedule(s);
  ZT_CHECK(stage >= 0 && stage < s.stages, "pipeline stage ", stage, " is out of range [0, ", s.stages, ")");
  const int P = s.stages, m = s.microbatches, v = s.virtual_stages;
  std::vector<Action> out;
  if (s.kind == PipeSchedule::gpipe) {
    for (int k = 0; k < m; ++k) add_forward(out, s, stage, k, 0);
    for (int k = 0; k < m; ++k) add_backward(out, s, stage, k, 0);
    return out;
  }
  if (s.kind == PipeSchedule::one_f_one_b) {
    // Warm-up: the forwards that fill the pipe below this stage; steady: one forward, one
    // backward; cool-down: the remaining backwards. At most P - stage micro-batches in flight.
    const int warmup = std::min(P - stage - 1, m);
    for (int k = 0; k < warmup; ++k) add_forward(out, s, stage, k, 0);
    for (int k = 0; k < m - warmup; ++k) {
      add_forward(out, s, stage, warmup + k, 0);
      add_backward(out, s, stage, k, 0);
    }
    for (int k = m - warmup; k < m; ++k) add_backward(out, s, stage, k, 0);
    return out;
  }
  // Interleaved (Megatron-LM's forward_backward_pipelining_with_interleaving): the k-th
  // forward of this stage is micro-batch (k / (P v)) P + k % P of chunk (k mod P v) / P, so
  // groups of P micro-batches go through chunk 0, then chunk 1, ...; backwards take the
  // chunks in reverse. Warm-up: 2 (P - stage - 1) + (v - 1) P forwards (all of them when
  // m == P), then 1F1B pairs, then the remaining backwards.
  const int total = m * v;
  auto mb_of = [&](int k) { return (k / (P * v)) * P + k % P; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k % (P * v)) / P;
    return forward ? c : v - 1 - c;
  };
  int warmup = m == P ? total : std::min(total, 2 * (P - stage - 1) + (v - 1) * P);
  for (int k = 0; k < warmup; ++k) add_forward(out, s, stage, mb_of(k), chunk_of(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    add_forward(out, s, stage, mb_of(warmup + k), chunk_of(warmup + k, true));
    add_backward(out, s, stage, mb_of(k), chunk_of(k, false));
  }
  for (int k = total - warmup; k < total; ++k) add_backward(out, s, stage, mb_of(k), chunk_of(k, false));
  return out;
}

std::vector<int> assign_slots(const std::vector<Action>& list, int m, int* slots) {
  auto compute = [](const Action& a) { return a.kind == ActionKind::forward || a.kind == ActionKind::backward; };
  std::vector<int> last(size_t(m), -1), slot(size_t(m), -1);
  for (size_t i = 0; i < list.size(); ++i) last[list[i].mb] = int(i);
  std::vector<char> busy;
  auto take = [&](int mb) {
    if (slot[mb] >= 0) return;
    size_t s = 0;
    while (s < busy.size() && busy[s]) ++s;
    if (s == busy.size()) busy.push_back(0);
    busy[s] = 1;
    slot[mb] = int(s);
  };
  for (size_t i = 0; i < list.size(); ++i) {
    if (compute(list[i]))
      for (size_t j = i + 1; j < list.size() && !compute(list[j]); ++j)
        if (list[j].kind == ActionKind::recv_act || list[j].kind == ActionKind::recv_grad) take(list[j].mb);
    take(list[i].mb);
    if (last[list[i].mb] == int(i)) busy[slot[list[i].mb]] = 0;
  }
  *slots = int(busy.size());
  return slot;
}

double ideal_bubble(const ScheduleSpec& s) {
  const double b = double(s.stages - 1) / double(s.virtual_stages);
  return b / (double(s.microbatches) + b);
}

namespace {

// The simulator's state: per stage its clock and what it has computed and received, and the
// messages sent. Times and counts go into the result as the actions run.
struct SimState {
  SimState(int stages, int virtual_stages, double forward_time, double backward_time, SimResult& result)
      : P(stages),
        v(virtual_stages),
        V(stages * virtual_stages),
        tf(forward_time),
        tb(backward_time),
        r(result),
        clock(size_t(stages), 0.0),
        in_flight(size_t(stages), 0),
        state(size_t(stages)),
        arrived(size_t(stages)) {
    r.busy.assign(size_t(P), 0.0);
    r.peak_in_flight.assign(size_t(P), 0);
  }
  const int P, v, V;
  const double tf, tb;
  SimResult& r;
  // Messages by (virtual stage they go to, kind 0 = activation / 1 = gradient, mb): the
  // time they were sent. Each must be sent once and received once.
  std::map<std::tuple<int, int, int>, double> sent;
  std::map<std::tuple<int, int, int>, int> received;
  std::vector<double> clock;
  std::vector<int> in_flight;
  // Per stage: which (mb, chunk) have been forwarded / backwarded, and which inputs arrived.
  std::vector<std::map<std::pair<int, int>, int>> state;    // 1 forwarded, 2 backwarded
  std::vector<std::map<std::pair<int, int>, int>> arrived;  // bit 1 act, bit 2 grad
};

enum class SimStep { ran, blocked, failed };

// A mistake in the action lists: its description goes to *error.
SimStep failed(std::string* error, std::string what) {
  *error = std::move(what);
  return SimStep::failed;
}

// A receive (blocked until the peer has sent) or a send (only of what was computed, once).
SimStep run_message(SimState& m, int s, const Action& a, std::string* error) {
  const int vs = virtual_stage(s, a.chunk, m.P);
  const auto key = std::pair{a.mb, a.chunk};
  if (a.kind == ActionKind::recv_act || a.kind == ActionKind::recv_grad) {
    const int kind = a.kind == ActionKind::recv_act ? 0 : 1;
    const auto it = m.sent.find({vs, kind, a.mb});
    if (it == m.sent.end()) return SimStep::blocked;  // blocked until the peer sends
    if (++m.received[{vs, kind, a.mb}] > 1)
      return failed(error, str_cat("stage ", s, " receives ", action_name(a.kind), " mb ", a.mb, " twice"));
    m.clock[s] = std::max(m.clock[s], it->second);
    m.arrived[s][key] |= kind == 0 ? 1 : 2;
    return SimStep::ran;
  }
  const bool act = a.kind == ActionKind::send_act;
  const int st = m.state[s][key];
  if ((act && st < 1) || (!act && st < 2))
    return failed(error, str_cat("stage ", s, " sends ", action_name(a.kind), " mb ", a.mb, " before computing it"));
  const int to = act ? vs + 1 : vs - 1;
  if (to < 0 || to >= m.V) return failed(error, str_cat("stage ", s, " sends past the pipeline's ends"));
  if (!m.sent.emplace(std::tuple{to, act ? 0 : 1, a.mb}, m.clock[s]).second)
    return failed(error, str_cat("stage ", s, " sends ", action_name(a.kind), " mb ", a.mb, " twice"));
  return SimStep::ran;
}

// A forward (after its input arrived, once) or a backward (after its forward and its gradient).
SimStep run_compute(SimState& m, int s, const Action& a, std::string* error) {
  const int vs = virtual_stage(s, a.chunk, m.P);
  const auto key = std::pair{a.mb, a.chunk};
  if (a.kind == ActionKind::forward) {
    if (vs > 0 && !(m.arrived[s][key] & 1))
      return failed(error,
                    str_cat("stage ", s, " forwards mb ", a.mb, " chunk ", a.chunk, " before its input arrived"));
    if (m.state[s][key] != 0) return failed(error, str_cat("stage ", s, " forwards mb ", a.mb, " twice"));
    m.state[s][key] = 1;
    m.clock[s] += m.tf / m.v;
    m.r.busy[s] += m.tf / m.v;
    m.r.peak_in_flight[s] = std::max(m.r.peak_in_flight[s], ++m.in_flight[s]);
    return SimStep::ran;
  }
  if (m.state[s][key] != 1)
    return failed(error,
                  str_cat("stage ", s, " runs backward of mb ", a.mb, " chunk ", a.chunk, " before its forward"));
  if (vs < m.V - 1 && !(m.arrived[s][key] & 2))
    return failed(error, str_cat("stage ", s, " runs backward of mb ", a.mb, " before its gradient arrived"));
  m.state[s][key] = 2;
  m.clock[s] += m.tb / m.v;
  m.r.busy[s] += m.tb / m.v;
  --m.in_flight[s];
  return SimStep::ran;
}

// The stages still waiting and on what: " stage s waits in <action> mb k;" each.
std::string waiting_stages(const std::vector<std::vector<Action>>& lists, const std::vector<size_t>& pc) {
  std::string where;
  for (size_t s = 0; s < lists.size(); ++s)
    if (pc[s] < lists[s].size())
      where += str_cat(" stage ", s, " waits in ", action_name(lists[s][pc[s]].kind), " mb ", lists[s][pc[s]].mb, ";");
  return where;
}

// After every list ran: the first micro-batch chunk a stage never finished, or the first message
// never received; "" when the schedule is complete.
std::string unfinished_work(SimState& m, int microbatches) {
  for (int s = 0; s < m.P; ++s)
    for (int c = 0; c < m.v; ++c)
      for (int k = 0; k < microbatches; ++k)
        if (m.state[s][{k, c}] != 2) return str_cat("stage ", s, " never finishes mb ", k, " chunk ", c);
  for (auto& [key, t] : m.sent)
    if (m.received[key] != 1) return str_cat("a message to virtual stage ", std::get<0>(key), " is never received");
  return "";
}

}  // namespace

SimResult simulate(const ScheduleSpec& spec, double tf, double tb) {
  const int P = spec.stages;
  SimResult r;
  std::vector<std::vector<Action>> lists;
  for (int s = 0; s < P; ++s) lists.push_back(make_schedule(spec, s));
  SimState m(P, spec.virtual_stages, tf, tb, r);
  std::vector<size_t> pc(size_t(P), 0);
  auto fail = [&](std::string msg) {
    r.ok = false;
    r.error = std::move(msg);
    return r;
  };
  std::string error;
  for (;;) {
    bool progress = false, done = true;
    for (int s = 0; s < P; ++s) {
      while (pc[s] < lists[s].size()) {
        const Action& a = lists[s][pc[s]];
        const bool message = a.kind != ActionKind::forward && a.kind != ActionKind::backward;
        const SimStep step = message ? run_message(m, s, a, &error) : run_compute(m, s, a, &error);
        if (step == SimStep::blocked) break;
        if (step == SimStep::failed) return fail(std::move(error));
        ++pc[s];
        progress = true;
      }
      done &= pc[s] == lists[s].size();
    }
    if (done) break;
    if (!progress) return fail("deadlock:" + waiting_stages(lists, pc));
  }
  if (std::string unfinished = unfinished_work(m, spec.microbatches); !unfinished.empty()) return fail(unfinished);
  r.makespan = *std::max_element(m.clock.begin(), m.clock.end());
  r.ok = true;
  return r;
}

// ---- Stage cuts.

int StageCut::stage_of_layer(int l) const {
  for (int k = 0; k < chunks(); ++k)
    if (l < layer_end(k)) return k % stages;
  return -1;
}

int StageCut::chunk_of_layer(int l) const {
  for (int k = 0; k < chunks(); ++k)
    if (l < layer_end(k)) return k / stages;
  return -1;
}

std::string StageCut::to_string() const {
  std::ostringstream o;
  for (int k = 0; k < chunks(); ++k) o << (k ? " | " : "") << layer_begin(k) << "-" << layer_end(k) - 1;
  return o.str();
}

StageCut cut_from_list(const std::string& list, int layers, int stages, int v) {
  StageCut c{stages, v, {0}};
  size_t b = 0;
  while (b <= list.size()) {
    const size_t e = std::min(list.find(',', b), list.size());
    const std::string item = list.substr(b, e - b);
    int n = 0;
    size_t used = 0;
    try {
      n = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    ZT_CHECK(used == item.size() && !item.empty() && n >= 1, "--pipeline_layers ", quote(list), ": ", quote(item),
             " is not a positive layer count; give one count per (virtual) stage, such as 6,6");
    c.first_layer.push_back(c.first_layer.back() + n);
    b = e + 1;
  }
  ZT_CHECK(int(c.first_layer.size()) - 1 == stages * v, "--pipeline_layers ", quote(list), " gives ",
           c.first_layer.size() - 1, " counts; the pipeline has ", stages, " stages x ", v,
           " virtual stages = ", stages * v);
  ZT_CHECK(c.first_layer.back() == layers, "--pipeline_layers ", quote(list), " adds up to ", c.first_layer.back(),
           " layers; the model has ", layers);
  return c;
}

StageCut cut_balanced(double embed_cost, const std::vector<double>& block, double head_cost, int stages, int v) {
  const int L = int(block.size()), K = stages * v;
  ZT_CHECK(L >= K, "the pipeline needs at least one layer per (virtual) stage: ", stages, " stages x ", v,
           " virtual stages = ", K, " > ", L, " layers; lower --pipeline-model-parallel-size");
  // Exact min-max partition of the sequence (embedding, blocks..., head) into K runs that each
  // hold at least one block, by dynamic programming over (runs, blocks used): O(K L^2).
  std::vector<double> pre(size_t(L) + 1, 0.0);
  for (int l = 0; l < L; ++l) pre[l + 1] = pre[l] + block[l];
  auto cost = [&](int k, int a, int b) {  // virtual stage k holding blocks [a, b)
    return pre[b] - pre[a] + (k == 0 ? embed_cost : 0.0) + (k == K - 1 ? head_cost : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(K) + 1, std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int>> from(size_t(K) + 1, std::vector<int>(size_t(L) + 1, -1));
  best[0][0] = 0;
  for (int k = 1; k <= K; ++k)
    for (int b = k; b <= L; ++b)
      for (int a = k - 1; a < b; ++a) {
        if (best[k - 1][a] == inf) continue;
        const double c = std::max(best[k - 1][a], cost(k - 1, a, b));
        // Ties: prefer the earlier cut point, so equal costs fill later stages first (the
        // first stage also carries the embedding's activations in flight the longest).
        if (c < best[k][b] - 1e-12) best[k][b] = c, from[k][b] = a;
      }
  StageCut c{stages, v, std::vector<int>(size_t(K) + 1, 0)};
  int b = L;
  for (int k = K; k >= 1; --k) {
    c.first_layer[k] = b;
    b = from[k][b];
  }
  c.first_layer[0] = 0;
  return c;
}

StageCut cut_per_virtual_stage(int layers, int stages, int per) {
  ZT_CHECK(per >= 1 && layers % (stages * per) == 0, "--num-layers-per-virtual-pipeline-stage ", per, " x ",
           "--pipeline-model-parallel-size ", stages, " must divide the model's ", layers, " layers");
  const int v = layers / (stages * per);
  StageCut c{stages, v, {}};
  for (int k = 0; k <= stages * v; ++k) c.first_layer.push_back(k * per);
  return c;
}

}  // namespace zt::parallel
