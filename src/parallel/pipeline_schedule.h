// pipeline_schedule.h: pipeline schedules as data, and the cut of a model into stages.
//
// A schedule is a pure function of (kind, stage, stages, micro-batches, virtual stages): the
// ordered list of actions one stage performs in one optimizer step. The executor
// (parallel/pipeline.h) runs a list over the model's pieces; the simulator here runs every
// stage's list together with unit-time compute, so the tests check the lists (matched sends
// and receives, no deadlock, in-flight micro-batches, the bubble) without MPI.
//
// Virtual stages (interleaved 1F1B, Megatron-LM's schedule): the layers are cut into
// stages x v chunks; stage s holds chunks c = 0..v-1, which are virtual stages c * stages + s
// (round robin), so a micro-batch visits stage 0, 1, ..., P-1, 0, 1, ... v times.
// Activations flow from virtual stage k to k+1, gradients from k+1 to k.
//
// It deliberately is not the executor (no buffers, no communicator) nor the trainer's flags.
#pragma once
#include <string>
#include <vector>

namespace zt::parallel {

enum class PipeSchedule { gpipe, one_f_one_b, interleaved };
const char* schedule_name(PipeSchedule s);
// "gpipe", "1f1b" or "interleaved"; anything else throws zt::Error naming the choices.
PipeSchedule parse_schedule(const std::string& s);

enum class ActionKind {
  recv_act,   // receive mb's activation for chunk c from the previous virtual stage
  forward,    // forward of mb through chunk c
  send_act,   // send mb's output of chunk c to the next virtual stage
  recv_grad,  // receive dL/d(output of chunk c) for mb from the next virtual stage
  backward,   // backward of mb through chunk c
  send_grad,  // send dL/d(input of chunk c) for mb to the previous virtual stage
};
const char* action_name(ActionKind k);

struct Action {
  ActionKind kind;
  int mb = 0;     // micro-batch
  int chunk = 0;  // model chunk on this stage (0 without virtual stages)
  bool operator==(const Action&) const = default;
};

struct ScheduleSpec {
  PipeSchedule kind = PipeSchedule::one_f_one_b;
  int stages = 1;          // P
  int microbatches = 1;    // m
  int virtual_stages = 1;  // v: chunks per stage (interleaved only; 1 otherwise)
};
// Throws zt::Error (one line naming the numbers) for a spec no schedule can run: P < 1,
// m < 1, v > 1 without interleaving, interleaved with m % P != 0 (Megatron's requirement).
void check_schedule(const ScheduleSpec& spec);

// The actions of `stage` (0-based) in one step. Receives come right before the compute that
// needs them and sends right after the compute that produces them (the executor posts
// receives earlier, so they overlap compute). First virtual stage: no recv_act / send_grad;
// last: no send_act / recv_grad (the loss's backward follows its forward).
std::vector<Action> make_schedule(const ScheduleSpec& spec, int stage);

// The virtual stage of (stage, chunk) and its neighbours' stage ranks.
inline int virtual_stage(int stage, int chunk, int stages) { return chunk * stages + stage; }

// Running every stage's list together: compute takes `forward_time` / `backward_time`, a
// send is instant and non-blocking (buffered), a receive waits for its matching send.
struct SimResult {
  bool ok = false;
  std::string error;                // the first mismatch or the deadlock, named
  double makespan = 0;              // time the last stage finishes
  std::vector<double> busy;         // per stage: time spent computing
  std::vector<int> peak_in_flight;  // per stage: most micro-batch chunks forwarded, not yet backwarded
  double bubble(int stage) const { return makespan > 0 ? 1.0 - busy[stage] / makespan : 0.0; }
};
SimResult simulate(const ScheduleSpec& spec, double forward_time = 1.0, double backward_time = 2.0);

// The ideal bubble fraction: (P - 1) / (m + P - 1) for GPipe and 1F1B; with v virtual stages
// the bubble time shrinks by v: ((P - 1) / v) / (m + (P - 1) / v).
double ideal_bubble(const ScheduleSpec& spec);

// The activation slot each of the m micro-batches takes on a stage running `list`: a micro-batch
// holds one from its first action (a receive is posted one compute ahead, as the executor does)
// to its last, and takes the lowest free one. Returns the slots per micro-batch; *slots gets how
// many the stage needs (what it holds activations for at once).
std::vector<int> assign_slots(const std::vector<Action>& list, int m, int* slots);

// ---- Stage assignment. The model's units in pipeline order: the embedding, the L blocks,
// the head. A cut gives every virtual stage a run of blocks; the embedding goes with the first
// virtual stage and the head with the last.
struct StageCut {
  int stages = 1, virtual_stages = 1;
  std::vector<int> first_layer;  // per virtual stage k: blocks [first_layer[k], first_layer[k + 1])
  int chunks() const { return stages * virtual_stages; }
  int layer_begin(int vs) const { return first_layer[vs]; }
  int layer_end(int vs) const { return first_layer[vs + 1]; }
  // The stage holding block l, and its chunk there.
  int stage_of_layer(int l) const;
  int chunk_of_layer(int l) const;
  std::string to_string() const;  // "0-5 | 6-11" (blocks per virtual stage)
};

// --pipeline_layers "6,6": blocks per virtual stage, in virtual-stage order. Throws zt::Error
// when the counts do not add up to the layers, a count is < 1, or there are not stages x v.
StageCut cut_from_list(const std::string& list, int layers, int stages, int virtual_stages);
// Balanced by cost: cost of the embedding, of each block (all blocks cost the same here,
// but the list allows otherwise) and of the head, as the memory estimator weighs them; each
// virtual stage gets at least one block. Minimises the largest stage's cost (a linear scan
// over the possible cuts, exact for this size). Throws when layers < stages x v.
StageCut cut_balanced(double embed_cost, const std::vector<double>& block_cost, double head_cost, int stages,
                      int virtual_stages);
// Megatron's --num-layers-per-virtual-pipeline-stage K: v = layers / (P * K), every chunk K
// blocks. Throws when P * K does not divide the layers.
StageCut cut_per_virtual_stage(int layers, int stages, int layers_per_virtual_stage);

}  // namespace zt::parallel
