#!/usr/bin/env bash
# hf_compat.sh: the HF Trainer flags of issue 22 item 4, each honoured or refused on one error line:
# --local_rank (against the launcher's local rank), --ddp_bucket_cap_mb (-> --reduce_bucket_size),
# --data_seed (the data order alone; resume stays exact), --logging_first_step, --run_name (the
# TensorBoard run folder, all_results.json), --use_cpu / --no_cuda, the schedules polynomial,
# cosine_with_restarts, inverse_sqrt (and reduce_lr_on_plateau refused), and `ztrain --version`.
# usage: hf_compat.sh path/to/ztrain [mpiexec]  (with mpiexec: --local_rank under 2 ranks too)
set -u
Z=$1
MPI=${2:-}
W=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
PY=/usr/bin/python3
$PY - "$W" <<'P'
import json, random, sys
w = sys.argv[1]
json.dump({"model_type": "gpt2", "vocab_size": 64, "n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 32},
          open(w + "/cfg.json", "w"))
r = random.Random(1)
open(w + "/train.bin", "wb").write(b"".join(r.randrange(64).to_bytes(2, "little") for _ in range(2000)))
P
fail=0
run() { "$Z" train --train_file "$W/train.bin" --per_device_train_batch_size 4 --model_max_length 16 \
  --report_to none --learning_rate 3e-3 --save_strategy no "$@"; }
rnd() { run --model_config_path "$W/cfg.json" --seed 1 "$@"; }
hist() {  # hist file key: "step:value" of the log_history entries that have key
  $PY -c "import json,sys; print(' '.join('%d:%r' % (e['step'], e[sys.argv[2]]) for e in json.load(open(sys.argv[1]))['log_history'] if sys.argv[2] in e and 'train_runtime' not in e))" "$1" "$2"
}
ok() { local d=$1; shift; "$@" >"$W/log" 2>&1 || { echo "FAIL: $d: exit $?"; tail -3 "$W/log"; fail=1; }; }
err() {  # err "expected text" args...: one error line holding the text, exit 1
  local want=$1; shift
  "$@" >/dev/null 2>"$W/err"
  local rc=$?
  [ $rc -eq 1 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q "^ztrain: error: .*$want" "$W/err" ||
    { echo "FAIL: ${*:2} -> rc $rc:"; cat "$W/err"; fail=1; }
}

# --logging_first_step: step 1 is logged besides every --logging_steps, even with --logging_strategy no.
ok "first step" rnd --output_dir "$W/fs" --max_steps 4 --logging_steps 2 --logging_first_step
[ "$(hist "$W/fs/trainer_state.json" loss | sed 's/:[^ ]*//g')" = "1 2 4" ] ||
  { echo "FAIL: --logging_first_step logged at $(hist "$W/fs/trainer_state.json" loss)"; fail=1; }
ok "first step, strategy no" rnd --output_dir "$W/fs0" --max_steps 3 --logging_strategy no --logging_first_step
[ "$(hist "$W/fs0/trainer_state.json" loss | sed 's/:[^ ]*//g')" = "1" ] ||
  { echo "FAIL: --logging_first_step --logging_strategy no logged at $(hist "$W/fs0/trainer_state.json" loss)"; fail=1; }

# --data_seed orders the data alone. From saved weights (no initialisation), the losses depend on
# the data order only: --seed 9 == --seed 1 --data_seed 9, and --data_seed 2 differs.
ok "base model" rnd --output_dir "$W/base" --max_steps 1
losses() { run --model_name_or_path "$W/base" --output_dir "$W/$1" --max_steps 3 --logging_steps 1 "${@:2}" \
  >"$W/log" 2>&1 || { echo "FAIL: run $1"; tail -2 "$W/log"; fail=1; }; hist "$W/$1/trainer_state.json" loss; }
a=$(losses s9 --seed 9); b=$(losses s1d9 --seed 1 --data_seed 9); c=$(losses s1d2 --seed 1 --data_seed 2)
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: --seed 9 gave $a, --seed 1 --data_seed 9 gave $b"; fail=1; }
[ "$a" != "$c" ] || { echo "FAIL: --data_seed 2 gave the losses of --data_seed 9: $c"; fail=1; }
# Resume keeps the data seed: the same one continues exactly, another is refused.
ok "data_seed run" rnd --output_dir "$W/ds" --max_steps 4 --logging_steps 1 --data_seed 5 --save_strategy steps --save_steps 2
full=$(hist "$W/ds/trainer_state.json" loss)
err "data seed 5 (--data_seed, else --seed), this run has 6" rnd --output_dir "$W/ds" --max_steps 4 --logging_steps 1 \
  --data_seed 6 --save_strategy steps --save_steps 2 --resume_from_checkpoint "$W/ds/checkpoint-2"
ok "data_seed resume" rnd --output_dir "$W/ds" --max_steps 4 --logging_steps 1 --data_seed 5 --save_strategy steps \
  --save_steps 2 --resume_from_checkpoint "$W/ds/checkpoint-2"
[ "$(hist "$W/ds/trainer_state.json" loss)" = "$full" ] ||
  { echo "FAIL: resumed --data_seed run: $(hist "$W/ds/trainer_state.json" loss), uninterrupted: $full"; fail=1; }
err "--data_seed has no effect without shuffling" rnd --output_dir "$W/e" --max_steps 1 --data_seed 3 --no_shuffle

# --run_name: the TensorBoard run folder and all_results.json.
ok "run_name" rnd --output_dir "$W/rn" --max_steps 1 --report_to tensorboard --run_name trial-7
ls "$W"/rn/runs/trial-7/events.out.tfevents.* >/dev/null 2>&1 || { echo "FAIL: no runs/trial-7 events"; ls -R "$W/rn/runs"; fail=1; }
$PY -c "import json,sys; sys.exit(json.load(open(sys.argv[1])).get('run_name') != 'trial-7')" "$W/rn/all_results.json" ||
  { echo "FAIL: all_results.json has no run_name"; fail=1; }
err "--run_name \"a/b\" must be one folder name" rnd --output_dir "$W/e" --max_steps 1 --run_name a/b

# --use_cpu / --no_cuda: --device cpu; against --device cuda, an error.
ok "use_cpu" rnd --output_dir "$W/cpu" --max_steps 1 --use_cpu
err "--use_cpu asks for the CPU but --device is \"cuda\"" rnd --output_dir "$W/e" --max_steps 1 --use_cpu --device cuda
err "--no_cuda asks for the CPU" rnd --output_dir "$W/e" --max_steps 1 --no_cuda --device cuda

# --local_rank: -1 and this process's local rank (0 without a launcher, LOCAL_RANK under torch's) pass.
ok "local_rank 0" rnd --output_dir "$W/lr0" --max_steps 1 --local_rank 0
ok "local_rank=-1" rnd --output_dir "$W/lr1" --max_steps 1 --local_rank=-1
ok "LOCAL_RANK 2" env LOCAL_RANK=2 "$Z" train --model_config_path "$W/cfg.json" --train_file "$W/train.bin" \
  --per_device_train_batch_size 4 --model_max_length 16 --report_to none --save_strategy no --output_dir "$W/lr2" \
  --max_steps 1 --local_rank=2
err "--local_rank 1 does not match this process's local rank 0 (no launcher)" rnd --output_dir "$W/e" --max_steps 1 --local_rank 1
err "local rank 3 (LOCAL_RANK)" env LOCAL_RANK=3 "$Z" train --model_config_path "$W/cfg.json" --train_file "$W/train.bin" \
  --output_dir "$W/e" --max_steps 1 --local_rank 0

# Under mpirun every rank gets the same --local_rank: rank 1's mismatch ends the job, naming it.
if [ -n "$MPI" ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 120 "$MPI" -np 2 --oversubscribe \
    "$Z" train --model_config_path "$W/cfg.json" --train_file "$W/train.bin" --per_device_train_batch_size 2 \
    --model_max_length 16 --report_to none --save_strategy no --output_dir "$W/mpi" --max_steps 1 --local_rank=0 \
    >"$W/mpi.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^\[rank 1\] error: --local_rank 0 does not match this process's local rank 1 (OMPI_COMM_WORLD_LOCAL_RANK)" "$W/mpi.log" ||
    { echo "FAIL: mpirun -np 2 --local_rank=0 -> rc $rc:"; head -5 "$W/mpi.log"; fail=1; }
fi

# --ddp_bucket_cap_mb: MiB -> fp32 elements for --reduce_bucket_size; the two must agree.
ok "bucket 1 MiB" rnd --output_dir "$W/bk" --max_steps 1 --ddp_bucket_cap_mb 1 --reduce_bucket_size 262144
err "--ddp_bucket_cap_mb 1 (262144 fp32 elements) and --reduce_bucket_size 1000 disagree" \
  rnd --output_dir "$W/e" --max_steps 1 --ddp_bucket_cap_mb 1 --reduce_bucket_size 1000

# Schedules: the logged learning_rate after step s is lr x lambda(s) (HF's get_last_lr()).
lr_check() {  # lr_check name expected-multipliers-of-steps-1..4 args...
  local name=$1 want=$2; shift 2
  ok "$name" rnd --output_dir "$W/$name" --max_steps 4 --logging_steps 1 --lr_scheduler_type "$@"
  $PY - "$W/$name/trainer_state.json" "$want" <<'P' || { echo "FAIL: $name learning rates"; fail=1; }
import json, sys
got = [e["learning_rate"] for e in json.load(open(sys.argv[1]))["log_history"] if "loss" in e and "learning_rate" in e]
want = [3e-3 * float(x) for x in sys.argv[2].split()]
ok = len(got) == len(want) and all(abs(g - w) <= 1e-9 * max(1.0, abs(w)) + 1e-15 for g, w in zip(got, want))
if not ok:
    print("got", got, "want", want)
sys.exit(0 if ok else 1)
P
}
# inverse_sqrt, warmup 2 (= timescale): s/2 in the warmup, then 1/sqrt(s/2).
lr_check inv "0.5 1.0 0.816496580927726 0.7071067811865476" inverse_sqrt --warmup_steps 2
# polynomial, power 2, lr_end 3e-4 (0.1 of the LR), no warmup: ((1-0.1)(1-s/4)^2 + 0.1).
lr_check poly "0.60625 0.325 0.15625 0.1" polynomial --lr_scheduler_kwargs '{"lr_end": 3e-4, "power": 2}'
# cosine_with_restarts, 2 cycles over 4 steps: 0.5(1 + cos(pi ((2 s/4) mod 1))), 0 at the end.
lr_check restarts "0.5 1.0 0.5 0.0" cosine_with_restarts --lr_scheduler_kwargs '{"num_cycles": 2}'
err "--lr_scheduler_kwargs key \"lr_end\" must be a number" rnd --output_dir "$W/e" --max_steps 1 \
  --lr_scheduler_type polynomial --lr_scheduler_kwargs '{"lr_end": "small"}'
err "reduce_lr_on_plateau is not implemented" rnd --output_dir "$W/e" --max_steps 1 --lr_scheduler_type reduce_lr_on_plateau

# ztrain --version / ztrain version.
for v in --version version; do
  "$Z" $v >"$W/v" 2>&1 || { echo "FAIL: ztrain $v: exit $?"; fail=1; }
  for k in "^ztrain [0-9]" "^commit: " "^build: " "^cpu isa: .*avx2" "^backends: MPI o[nf]*, CUDA o[nf]*, oneDNN [0-9]"; do
    grep -q "$k" "$W/v" || { echo "FAIL: ztrain $v has no line $k:"; cat "$W/v"; fail=1; }
  done
done
[ $fail -eq 0 ] && echo "hf_compat: all passed"
exit $fail
