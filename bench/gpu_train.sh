#!/usr/bin/env bash
# gpu_train.sh: ztrain training on the GPU, end to end, on a GPU machine (docs/gpu.md). Runs the
# binaries bench/gpu_pack.sh packed (.gpu/run.tar.xz: ztrain, its libraries, the quickstart's
# tokens) and prints one table last:
#   parity   the same run (seed, data) on --device cpu and --device cuda, 10 steps, fp32 and bf16,
#            a small Llama (the quickstart's) and a small GPT-2: the largest per-step loss difference
#   resume   a run saved on the GPU at step 5 and resumed on the CPU: steps 6-10 against the GPU's own
#   families the same parity for small OLMo-2, Phi-3 (longrope past its original context), Gemma 3 and
#            Gemma 2 (soft-capped scores and logits) configs
#   offload  ZeRO-Offload (--offload_optimizer cpu): per-step losses against the GPU optimizer's run
#            (fp32, bf16), DeepSpeed's stage 2 + offload_optimizer JSON saved at 5 and resumed on the
#            CPU; a 1.1B Llama (TinyLlama's shape) under a --max_device_memory cap that only the
#            offloaded run fits: the refusal, the losses, and the step against max(GPU compute,
#            copies at the measured bandwidth, CPU optimizer)
#   speed    GPT-2 124M (random weights), bf16, T=1024: tokens/s, MFU against the measured GEMM peak,
#            and the GPU memory peak
# ZT_GPU_TRAIN_PARTS (default parity,resume,families,offload,speed) picks the sections.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=",${ZT_GPU_TRAIN_PARTS:-parity,resume,families,offload,speed},"
out="${OUT:-/tmp/gpu_train}"
mkdir -p "$out"
run=/tmp/zt_run/run
[ -x "$run/ztrain" ] || { mkdir -p /tmp/zt_run && tar xJf .gpu/run.tar.xz -C /tmp/zt_run; }
export LD_LIBRARY_PATH="$run/lib:${LD_LIBRARY_PATH:-}" OMP_NUM_THREADS=8
Z="$run/ztrain"
D="$run/data"
summary="$out/train_summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

cat >"$out/gpt2-small.json" <<'J'
{"model_type": "gpt2", "vocab_size": 16384, "n_positions": 256, "n_embd": 256, "n_layer": 4, "n_head": 4}
J
cat >"$out/gpt2-124m.json" <<'J'
{"model_type": "gpt2", "vocab_size": 50304, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12}
J
# The four families of issue 22 at quickstart size: head_dim 32, windows shorter than the rows.
fam='"vocab_size": 16384, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
  "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 256'
echo "{\"model_type\": \"olmo2\", $fam, \"attention_bias\": true}" >"$out/olmo2.json"
echo "{\"model_type\": \"phi3\", $fam, \"sliding_window\": 64, \"original_max_position_embeddings\": 64,
  \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": $(python3 -c 'print([1 + i / 40 for i in range(16)])'),
  \"long_factor\": $(python3 -c 'print([1 + i for i in range(16)])')}}" >"$out/phi3.json"
echo "{\"model_type\": \"gemma3_text\", $fam, \"head_dim\": 32, \"sliding_window\": 32,
  \"sliding_window_pattern\": 2, \"query_pre_attn_scalar\": 64}" >"$out/gemma3.json"
echo "{\"model_type\": \"gemma2\", $fam, \"head_dim\": 32, \"sliding_window\": 32, \"query_pre_attn_scalar\": 64,
  \"attn_logit_softcapping\": 5.0, \"final_logit_softcapping\": 10.0}" >"$out/gemma2.json"
train() {  # name, device, config, extra flags...
  local name=$1 dev=$2 cfg=$3
  shift 3
  timeout 120 "$Z" train --model_config_path "$cfg" --train_file "$D/train.bin" --validation_file "$D/validation.bin" \
    --per_device_train_batch_size 8 --model_max_length 128 --learning_rate 2e-3 --weight_decay 0.1 \
    --warmup_steps 2 --max_steps 10 --logging_steps 1 --save_strategy no --seed 3 \
    --output_dir "$out/$name" --overwrite_output_dir --device "$dev" "$@" >"$out/$name.log" 2>&1
  echo $?
}
losses() { python3 -c "
import json,sys
for l in open('$out/$1/metrics.jsonl'):
    r=json.loads(l)
    if 'loss' in r and 'eval_loss' not in r: print(r['step'], r['loss'])"; }
compare() {  # run a, run b, first step compared
  python3 - "$out/$1/metrics.jsonl" "$out/$2/metrics.jsonl" "${3:-1}" <<'P'
import json, sys
def read(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and "eval_loss" not in r}
a, b, first = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
steps = [s for s in sorted(a) if s >= first and s in b]
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in steps) if steps else float("nan")
print(f"{worst:.2e} over steps {steps[0] if steps else '-'}..{steps[-1] if steps else '-'}")
P
}

parity() {  # model name, config: the same run on both devices in fp32 and bf16
  local flags prec rc_c rc_g
  for prec in fp32 bf16; do
    flags=()
    [ $prec = bf16 ] && flags=(--bf16)
    rc_c=$(train "$1-$prec-cpu" cpu "$2" "${flags[@]}")
    rc_g=$(train "$1-$prec-gpu" cuda "$2" "${flags[@]}")
    note "$1 $prec: rc cpu $rc_c gpu $rc_g; worst per-step loss difference $(compare "$1-$prec-gpu" "$1-$prec-cpu")"
  done
}

[[ $parts == *,parity,* ]] && note "== parity: --device cpu against --device cuda, 10 steps"
[[ $parts == *,parity,* ]] && for model in llama gpt2; do
  cfg=configs/quickstart-llama.json
  [ $model = gpt2 ] && cfg="$out/gpt2-small.json"
  parity "$model" "$cfg"
done

[[ $parts == *,families,* ]] && note "== families: --device cpu against --device cuda, 10 steps"
[[ $parts == *,families,* ]] && for model in olmo2 phi3 gemma3 gemma2; do parity "$model" "$out/$model.json"; done

if [[ $parts == *,resume,* ]]; then
note "== resume: saved on the GPU at step 5, resumed on the CPU"
rc1=$(train resume-gpu cuda configs/quickstart-llama.json --save_strategy steps --save_steps 5)
rc2=$(train resume-cpu cpu configs/quickstart-llama.json --resume_from_checkpoint "$out/resume-gpu/checkpoint-5" \
  --output_dir "$out/resume-cpu" --overwrite_output_dir)
note "rc $rc1 $rc2; steps 6-10 on the CPU against the GPU run: $(compare resume-cpu resume-gpu 6)"
fi

[[ $parts == *,offload,* ]] && source bench/gpu_offload.sh

[[ $parts == *,speed,* ]] && note "== speed: GPT-2 124M, bf16, T=1024, random weights"
[[ $parts == *,speed,* ]] && for B in 16 32; do
  timeout 120 "$Z" train --model_config_path "$out/gpt2-124m.json" --train_file "$D/train.bin" \
    --per_device_train_batch_size $B --model_max_length 1024 --bf16 --learning_rate 6e-4 --max_steps 30 \
    --logging_steps 10 --save_strategy no --output_dir "$out/speed$B" --overwrite_output_dir --device cuda \
    >"$out/speed$B.log" 2>&1
  note "B=$B rc $?: $(grep -E "step (20|30)/30" "$out/speed$B.log" | tail -1 | grep -oE '[0-9.]+ tokens/s +MFU [0-9.]+%')" \
    "$(grep -E 'GPU memory' "$out/speed$B.log")"
done
grep -h -iE 'error|peak' "$out"/*.log | sort | uniq -c | head -20

echo
echo "================ training summary ================"
cat "$summary"
