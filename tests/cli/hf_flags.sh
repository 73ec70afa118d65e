#!/usr/bin/env bash
# hf_flags.sh: Hugging Face Trainer flags users paste in: the strategies (eval / save / logging,
# epoch included), --evaluation_strategy's old name, --per_device_eval_batch_size (the same
# eval_loss), --load_best_model_at_end, the accepted ones; HF flags ztrain does not implement and
# unsupported values are one error line naming them.
# usage: hf_flags.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
$PY - "$W" <<'P'
import json, random, sys
w = sys.argv[1]
json.dump({"model_type": "gpt2", "vocab_size": 64, "n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 32},
          open(w + "/cfg.json", "w"))
r = random.Random(1)
# Learnable data (a repeating pattern) so evaluations differ.
seq = [r.randrange(64) for _ in range(50)]
open(w + "/train.bin", "wb").write(b"".join(seq[i % 50].to_bytes(2, "little") for i in range(2000)))
open(w + "/val.bin", "wb").write(b"".join(seq[i % 50].to_bytes(2, "little") for i in range(400)))
P
fail=0
run() { "$Z" train --model_config_path "$W/cfg.json" --train_file "$W/train.bin" --validation_file "$W/val.bin" \
  --per_device_train_batch_size 4 --model_max_length 16 --report_to none --learning_rate 3e-3 --seed 1 "$@"; }
evals() { $PY -c "import json,sys; print(' '.join(str(e['step']) for e in json.load(open(sys.argv[1]))['log_history'] if 'eval_loss' in e))" "$1"; }
logs() { $PY -c "import json,sys; print(' '.join(str(e['step']) for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e))" "$1"; }
# 2000 tokens / 16 = 124 windows / 4 = 31 steps per epoch; 2 epochs.
run --output_dir "$W/ep" --num_train_epochs 2 --eval_strategy epoch --save_strategy epoch --logging_strategy epoch \
  --do_train --do_eval --dataloader_num_workers 0 --save_safetensors >"$W/log" 2>&1 || { echo "FAIL: epoch run"; tail -3 "$W/log"; fail=1; }
[ "$(evals "$W/ep/trainer_state.json")" = "31 62" ] || { echo "FAIL: eval_strategy epoch evaluated at $(evals "$W/ep/trainer_state.json")"; fail=1; }
[ "$(logs "$W/ep/trainer_state.json")" = "31 62" ] || { echo "FAIL: logging_strategy epoch logged at $(logs "$W/ep/trainer_state.json")"; fail=1; }
[ -d "$W/ep/checkpoint-31" ] && [ -d "$W/ep/checkpoint-62" ] || { echo "FAIL: save_strategy epoch"; ls "$W/ep"; fail=1; }
run --output_dir "$W/st" --max_steps 6 --evaluation_strategy steps --eval_steps 2 --save_strategy no \
  --logging_strategy no >"$W/log" 2>&1 || { echo "FAIL: steps run"; tail -3 "$W/log"; fail=1; }
[ "$(evals "$W/st/trainer_state.json")" = "2 4 6" ] || { echo "FAIL: --evaluation_strategy steps: $(evals "$W/st/trainer_state.json")"; fail=1; }
[ -z "$(logs "$W/st/trainer_state.json")" ] || { echo "FAIL: --logging_strategy no logged $(logs "$W/st/trainer_state.json")"; fail=1; }
# The evaluation batch changes nothing but the batch.
loss_of() { $PY -c "import json,sys; print([e['eval_loss'] for e in json.load(open(sys.argv[1]))['log_history'] if 'eval_loss' in e][-1])" "$1"; }
run --output_dir "$W/b4" --max_steps 3 --save_strategy no >/dev/null 2>&1
run --output_dir "$W/b1" --max_steps 3 --save_strategy no --per_device_eval_batch_size 1 >/dev/null 2>&1
a=$(loss_of "$W/b4/trainer_state.json"); b=$(loss_of "$W/b1/trainer_state.json")
$PY -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b) > 1e-6*abs(a))" "$a" "$b" ||
  { echo "FAIL: --per_device_eval_batch_size 1 gave eval_loss $b, batch 4 gave $a"; fail=1; }
# --load_best_model_at_end: the best checkpoint survives --save_total_limit 1 and its weights are the output.
run --output_dir "$W/best" --max_steps 6 --eval_strategy steps --eval_steps 2 --save_steps 2 --save_total_limit 1 \
  --load_best_model_at_end --metric_for_best_model eval_loss --greater_is_better true >"$W/log" 2>&1 ||
  { echo "FAIL: load_best run"; tail -3 "$W/log"; fail=1; }
grep -q "Loading best model from .*checkpoint-2 " "$W/log" || { echo "FAIL: greater_is_better: best is not step 2"; grep -i best "$W/log"; fail=1; }
[ -d "$W/best/checkpoint-2" ] || { echo "FAIL: the best checkpoint was pruned"; ls "$W/best"; fail=1; }
same_tensors() { $PY - "$1" "$2" <<'P'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
sys.exit(tensors(sys.argv[1]) != tensors(sys.argv[2]))
P
}
same_tensors "$W/best/model.safetensors" "$W/best/checkpoint-2/model.safetensors" ||
  { echo "FAIL: --output_dir does not hold the best checkpoint's weights"; fail=1; }
# One error line each.
err() {
  local want=$1; shift
  run --output_dir "$W/e" --max_steps 1 "$@" >/dev/null 2>"$W/err"
  local rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l <"$W/err")" -eq 1 ] && grep -q -- "$want" "$W/err" ||
    { echo "FAIL: $* -> rc $rc:"; cat "$W/err"; fail=1; }
  rm -rf "$W/e"
}
err "--do_predict is a Hugging Face TrainingArguments flag that ztrain does not implement" --do_predict
err "--torch_compile is a Hugging Face TrainingArguments flag" --torch_compile true
err "--label_smoothing_factor 0.1 is not implemented" --label_smoothing_factor 0.1
err "--dataloader_num_workers 4: ztrain's loader is one background thread" --dataloader_num_workers 4
err "always trains" --do_train false
err "safetensors only" --save_safetensors false
err "eval_strategy \"sometimes\"" --eval_strategy sometimes
err "report_to" --report_to wandb
err "save and eval strategy to match" --eval_strategy steps --save_strategy epoch --load_best_model_at_end
err "metric_for_best_model \"accuracy\"" --metric_for_best_model accuracy
err "exceeds --per_device_train_batch_size" --per_device_eval_batch_size 8
[ $fail -eq 0 ] && echo "hf_flags: all passed"
exit $fail
