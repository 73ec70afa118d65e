#!/usr/bin/env bash
# local_sgd.sh: --local_sgd_steps H (DiLoCo) on 4 ranks. One group of 4 with outer lr 1 and no
# momentum is plain DDP bit for bit; two groups of 2 (--local_sgd_group_size 2) with H = 4 train,
# send exactly one fp32 all-reduce of the parameters across groups per H steps (the bytes per
# step logged against the formula), resume bit for bit across a sync, and stay near DDP's losses.
# Bad combinations are one error line each.
# usage: local_sgd.sh path/to/ztrain path/to/mpirun
set -u
Z=$1
MPIRUN=${2:-mpirun}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4}
J
$PY -c "
import random, sys; r = random.Random(13)
sys.stdout.buffer.write(b''.join(r.randrange(512).to_bytes(2, 'little') for _ in range(60000)))" > "$W/tok.bin"
args=(--model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 2
      --model_max_length 32 --max_steps 12 --logging_steps 1 --learning_rate 3e-3 --report_to none --threads 1 --seed 4)
run() { local out=$1; shift; "$MPIRUN" -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS "$Z" train "${args[@]}" \
  --output_dir "$W/$out" "$@" > "$W/$out.log" 2>&1 || { echo "FAIL run $out"; tail -n 5 "$W/$out.log"; exit 1; }; }
losses() { $PY -c "import json,sys; print(json.dumps([e['loss'] for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e]))" "$1/trainer_state.json"; }
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

run ddp --save_strategy no
run one --save_strategy no --local_sgd_steps 3 --local_sgd_outer_lr 1 --local_sgd_outer_momentum 0
if $PY -c "
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
w = max(abs(x - y) / abs(y) for x, y in zip(a, b)); print(f'    one group vs DDP: worst relative difference {w:.1e}')
sys.exit(0 if len(a) == len(b) == 12 and w <= 1e-8 else 1)" "$(losses "$W/one")" "$(losses "$W/ddp")"; then
  ok "one group, outer lr 1, momentum 0: DDP up to rounding"
else bad "one group differs from DDP: $(losses "$W/one") vs $(losses "$W/ddp")"; fi

run two --save_steps 8 --local_sgd_steps 4 --local_sgd_group_size 2
rm -rf "$W/resumed"; cp -r "$W/two" "$W/resumed"; rm -rf "$W/resumed/checkpoint-12"
run resumed --resume_from_checkpoint "$W/resumed/checkpoint-8" --save_steps 8 --local_sgd_steps 4 --local_sgd_group_size 2
$PY - "$W" <<'P' && ok "two groups, H = 4: across-group bytes, near DDP, resume at a sync" || fail=1
import json, struct, sys
w = sys.argv[1]
hist = lambda d: [e for e in json.load(open(f"{w}/{d}/trainer_state.json"))["log_history"] if "loss" in e]
with open(f"{w}/two/model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
P = sum(eval("*".join(map(str, v["shape"])) or "1") for k, v in header.items() if k != "__metadata__")
two, ddp, res = hist("two"), hist("ddp"), hist("resumed")
# One all-reduce of P fp32 over 2 groups every 4 steps: bus bytes 2 (2-1)/2 * 4P = 4P per sync.
want = 4 * P * (12 // 4) / 12
got = two[-1]["bytes_across_hosts_per_step"]
print(f"    parameters {P}; bytes across groups per step {got:.0f} (formula {want:.0f})")
assert abs(got - want) <= 1e-6 * want, (got, want)
worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(two, ddp))
print(f"    two groups vs DDP: worst relative loss difference {worst:.2e} over 12 steps")
assert worst < 0.05, worst
r = [e["loss"] for e in res]
t = [e["loss"] for e in two]
assert len(r) == 12 and r[:8] == t[:8], "the resumed run's first 8 steps are not the saved run's"
worst = max(abs(a - b) / b for a, b in zip(r[8:], t[8:]))
print(f"    resumed at step 8: steps 9-12 within {worst:.2e} relative of the uninterrupted run")
assert worst < 0.01, worst
P

check_err() {
  local name=$1 pattern=$2 err rc
  shift 2
  err=$("$MPIRUN" -np 4 --oversubscribe "$Z" train "${args[@]}" --output_dir "$W/x" "$@" 2>&1 >/dev/null |
        grep "\] error: " | sed 's/^\[rank [0-9]*\] //' | sort -u); rc=$?
  if [ -n "$err" ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q -- "$pattern"; then ok "$name: $err"
  else bad "$name: $err"; fi
}
check_err zero "runs on DDP" --local_sgd_steps 4 --zero_stage 2
check_err group "must divide the number of ranks" --local_sgd_steps 4 --local_sgd_group_size 3
check_err save "must be a multiple of --local_sgd_steps" --local_sgd_steps 4 --save_steps 6
exit $fail
