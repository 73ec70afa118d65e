# gpu_offload.sh: bench/gpu_train.sh's offload part (sourced there: $Z, $D, $out, train, compare and
# note come from it). ZeRO-Offload (--offload_optimizer cpu, docs/gpu.md) against the GPU optimizer.
note "== offload: --offload_optimizer cpu against the GPU's own optimizer, 10 steps (quickstart Llama)"
for prec in fp32 bf16; do
  flags=()
  [ $prec = bf16 ] && flags=(--bf16)
  rc_a=$(train "offload-$prec-gpu" cuda configs/quickstart-llama.json "${flags[@]}")
  rc_b=$(train "offload-$prec-cpu" cuda configs/quickstart-llama.json "${flags[@]}" --offload_optimizer cpu)
  note "llama $prec: rc $rc_a $rc_b; worst per-step loss difference $(compare "offload-$prec-cpu" "offload-$prec-gpu")"
done
cat >"$out/ds_offload.json" <<'J'
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}},
 "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
J
rc1=$(train offload-ds cuda configs/quickstart-llama.json --deepspeed "$out/ds_offload.json" --save_strategy steps \
  --save_steps 5)
rc2=$(train offload-resume cpu configs/quickstart-llama.json --resume_from_checkpoint "$out/offload-ds/checkpoint-5" \
  --output_dir "$out/offload-resume" --overwrite_output_dir)
note "DeepSpeed stage 2 + offload_optimizer cpu: rc $rc1 $rc2; against the GPU optimizer $(compare offload-ds \
offload-fp32-gpu); saved at 5, resumed on the CPU: steps 6-10 $(compare offload-resume offload-ds 6)"
grep -h 'ztrain: note' "$out/offload-ds.log" | head -2 | tee -a "$summary"

# A 1.1B Llama (TinyLlama's shape), bf16, B=4, T=1024, under a cap between the two estimates.
cat >"$out/llama-1b.json" <<'J'
{"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
 "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
J
gib() {  # estimate-memory --device cuda's total for the 1.1B run, in GiB
  "$Z" estimate-memory --model_config_path "$out/llama-1b.json" --device cuda --bf16 --per_device_train_batch_size 4 \
    --model_max_length 1024 "$@" | python3 -c "
import sys
for l in sys.stdin:
    if l.strip().startswith('1 GPU'):
        v, u = l.split()[-2:]
        print(round(float(v) / (1024 if u == 'MiB' else 1), 2))"
}
full=$(gib) off=$(gib --offload_optimizer cpu)
cap=$(python3 -c "print(round(($full + $off) / 2, 1))")
big() {  # name, extra flags...
  local name=$1
  shift
  timeout 150 "$Z" train --model_config_path "$out/llama-1b.json" --train_file "$D/train.bin" --bf16 \
    --per_device_train_batch_size 4 --model_max_length 1024 --learning_rate 3e-4 --max_steps 8 --logging_steps 1 \
    --save_strategy no --seed 3 --output_dir "$out/$name" --overwrite_output_dir --device cuda "$@" \
    >"$out/$name.log" 2>&1
  echo $?
}
note "1.1B Llama: estimate ${full} GiB, with offload ${off} GiB; --max_device_memory ${cap}GiB"
rc_cap=$(big big-capped --max_device_memory "${cap}GiB")
note "without offload under the cap: rc $rc_cap: $(grep -h 'error' "$out/big-capped.log" | head -1 | cut -c1-220)"
rc_gpu=$(big big-gpu)
rc_off=$(big big-offload --offload_optimizer cpu --max_device_memory "${cap}GiB")
note "GPU optimizer rc $rc_gpu, offloaded under the cap rc $rc_off; worst per-step loss difference \
$(compare big-offload big-gpu)"
grep -h 'GPU memory\|Offload:' "$out/big-offload.log" | tee -a "$summary"
python3 - "$out" <<'P' | tee -a "$summary"
import json, sys
out = sys.argv[1]
def steps(name):  # mean step time over steps 3.. (the first two warm up)
    t = [r["step_time_s"] for r in map(json.loads, open(f"{out}/{name}/metrics.jsonl")) if r.get("step", 0) >= 3 and "step_time_s" in r]
    return sum(t) / len(t)
try:
    o = json.load(open(f"{out}/big-offload/train_results.json"))["data_parallel"]["offload"]
    gpu, off = steps("big-gpu"), steps("big-offload")
    bound = max(gpu, o["copy_s"], o["cpu_optimizer_s"])
    print(f"offload step {off:.3f} s; GPU run's step {gpu:.3f} s, copies {o['copy_s']:.3f} s, CPU optimizer "
          f"{o['cpu_optimizer_s']:.3f} s: step / max = {off / bound:.2f} (bar 1.3)")
except Exception as e:
    print(f"offload timing: {e!r}")
P
