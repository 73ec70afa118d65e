#!/usr/bin/env bash
# lora_moe.sh: LoRA on mixture-of-experts models (tiny random Mixtral, Qwen2-MoE, Qwen3-MoE folders; the
# numbers against PyTorch are tests/parity/lora_parity.py's mixtral_attention, mixtral_all_linear and
# qwen2moe_experts cases). The attention modules adapted (router and experts frozen): recomputation
# changes nothing, a resumed run repeats the uninterrupted one, a checkpoint holds the adapters only,
# bf16 and DoRA train; with mpirun, ZeRO-3, expert parallelism 2, tensor parallelism 2 + SP, 2 pipeline
# stages and context parallelism 2 give one process's losses, an EP checkpoint resumes in one process;
# QLoRA (the experts in NF4) trains, recomputes exactly and gives one process's losses under EP 2.
# PEFT's all-linear (router, every expert's modules, the shared expert too): recomputation with dropout
# exact, resume exact, bf16 and QLoRA train; EP 2, TP 2 + SP, ZeRO-3 and PP 2 give one process's
# losses and an EP 2 checkpoint (each rank holding its experts' adapters) resumes in one process.
# One expert's module alone, DoRA on an MoE module and an unknown name are one clear error line each.
# usage: lora_moe.sh path/to/ztrain [path/to/mpirun]
set -u
# The sanitizer pass (ZT_TEST_SUBSET=sanitizers) runs each code path once: Mixtral and Qwen2-MoE (not
# Qwen3-MoE) one-process runs, EP 2 and TP 2 of the 2-rank layouts, no QLoRA under TP 2.
full() { [ "${ZT_TEST_SUBSET:-}" != sanitizers ]; }
Z=$1
MPI=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lora_common.sh"
CFG=$HERE/../fixtures/configs

size=(--vocab_size 300 --hidden_size 64 --n_layer 2 --n_head 4 --n_kv_head 2 --seed 3 --num_tokens 6000 --perturb)
$PY "$HERE/../parity/make_model.py" --config "$CFG/mixtral-8x7b-v0.1.json" --ffn 48 "${size[@]}" \
  --set '{"num_local_experts": 4, "output_router_logits": true, "router_aux_loss_coef": 0.05}' \
  --out "$W/mixtral" --tokens "$W/t.bin" >/dev/null || exit 1
$PY "$HERE/../parity/make_model.py" --config "$CFG/qwen1.5-moe-a2.7b.json" "${size[@]}" \
  --set '{"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48}' \
  --out "$W/qwen" --tokens "$W/tq.bin" >/dev/null || exit 1
$PY "$HERE/../parity/make_model.py" --config "$CFG/qwen3-30b-a3b.json" "${size[@]}" --head_dim 16 \
  --set '{"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}' \
  --out "$W/qwen3" --tokens "$W/tq.bin" >/dev/null || exit 1
common=(--use_peft --lora_r 4 --lora_target_modules q_proj,k_proj,v_proj,o_proj --train_file "$W/t.bin"
  --overwrite_output_dir --no_shuffle --logging_steps 1 --per_device_train_batch_size 2 --model_max_length 32
  --learning_rate 1e-3)
run() {  # run MODEL ARGS...: one process
  local m=$1; shift
  "$Z" train --model_name_or_path "$W/$m" "${common[@]}" "$@" >"$W/last.out" 2>&1 || { tail -3 "$W/last.out"; return 1; }
}
launch() {  # launch RANKS OUT MODEL ARGS...
  local n=$1 out=$2 m=$3; shift 3
  "$Z" launch --nproc_per_node "$n" -- train --model_name_or_path "$W/$m" "${common[@]}" "$@" --output_dir "$W/$out" \
    >"$W/$out.out" 2>&1 || { tail -3 "$W/$out.out"; return 1; }
}

for m in mixtral qwen qwen3; do
  [ $m != qwen3 ] || full || continue
  run $m --max_steps 6 --save_steps 3 --lora_dropout 0.1 --gradient_accumulation_steps 2 --output_dir "$W/${m}_a" &&
    a=$(losses "$W/${m}_a") || a="[]"
  run $m --max_steps 6 --save_strategy no --lora_dropout 0.1 --gradient_accumulation_steps 2 --gradient_checkpointing \
    --output_dir "$W/${m}_r" && same "$a" "$(losses "$W/${m}_r")" 0 &&
    ok "$m: full recomputation gives the same losses (dropout on)" || bad "$m recomputation"
  run $m --max_steps 6 --save_steps 3 --lora_dropout 0.1 --gradient_accumulation_steps 2 --output_dir "$W/${m}_a" \
    --resume_from_checkpoint "$W/${m}_a/checkpoint-3" && same "$a" "$(losses "$W/${m}_a")" 0 &&
    ok "$m: resume from step 3 repeats the uninterrupted run's losses" || bad "$m resume"
  run $m --max_steps 3 --save_strategy no --lora_dropout 0.1 --gradient_accumulation_steps 2 --bf16 \
    --output_dir "$W/${m}_b" &&
    same "$(losses "$W/${m}_b")" "$($PY -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[:3]))" "$a")" 2e-2 &&
    ok "$m: bf16 trains (losses within 2e-2 of fp32's)" || bad "$m bf16"
done
HERE=$HERE $PY - "$W/mixtral_a/checkpoint-3" <<'P' && ok "a checkpoint holds the attention adapters and their optimizer state only" || bad "checkpoint contents"
import json, os, sys
ck = sys.argv[1]
sys.path.insert(0, os.path.join(os.environ["HERE"], "..", "parity"))
import hfmodels
names = list(hfmodels.read_safetensors(os.path.join(ck, "adapter_model.safetensors")))
assert len(names) == 16 and all(".self_attn." in n and ".lora_" in n for n in names), names
assert "model.safetensors" not in os.listdir(ck)
for f in os.listdir(ck):
    if f.startswith("state-"):
        pieces = json.loads(hfmodels.read_safetensors_metadata(os.path.join(ck, f))["pieces"])
        assert pieces and all(".lora_" in p["tensor"] for p in pieces.values()), pieces
P
# QLoRA: the experts in NF4 (one expert dequantized at a time), double quantization; recomputation
# exact; expert parallelism quantizes each expert's tensors as one process does, so it gives its losses.
run mixtral --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 --output_dir "$W/l4" &&
  run mixtral --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 --load_in_4bit \
    --bnb_4bit_use_double_quant --output_dir "$W/q4" && grep -q "QLoRA base: .* in NF4" "$W/last.out" &&
  same "$(losses "$W/q4")" "$(losses "$W/l4")" 2e-2 && ok "QLoRA on Mixtral trains (losses within 2e-2 of LoRA's)" ||
  bad "QLoRA on Mixtral"
run mixtral --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 --load_in_4bit \
  --bnb_4bit_use_double_quant --gradient_checkpointing --output_dir "$W/q4r" && same "$(losses "$W/q4")" "$(losses "$W/q4r")" 0 &&
  ok "QLoRA on Mixtral: full recomputation gives the same losses" || bad "QLoRA Mixtral recomputation"
# PEFT's all-linear: the router and every expert's w1 / w3 / w2 (Qwen2-MoE: and its shared expert) too.
AL=(--lora_target_modules all-linear)
run mixtral "${AL[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0.1 --gradient_accumulation_steps 2 \
  --output_dir "$W/al_a" && al=$(losses "$W/al_a") || al="[]"
run mixtral "${AL[@]}" --max_steps 6 --save_strategy no --lora_dropout 0.1 --gradient_accumulation_steps 2 \
  --gradient_checkpointing --output_dir "$W/al_r" && same "$al" "$(losses "$W/al_r")" 0 &&
  run mixtral "${AL[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0.1 --gradient_accumulation_steps 2 \
    --output_dir "$W/al_a" --resume_from_checkpoint "$W/al_a/checkpoint-3" && same "$al" "$(losses "$W/al_a")" 0 &&
  ok "Mixtral all-linear (experts' adapters, dropout on): recomputation and resume repeat the run's losses" ||
  bad "Mixtral all-linear recomputation / resume"
run qwen "${AL[@]}" --max_steps 3 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 2 \
  --output_dir "$W/alq" && run qwen "${AL[@]}" --max_steps 3 --save_strategy no --lora_dropout 0 \
  --gradient_accumulation_steps 2 --bf16 --output_dir "$W/alqb" && same "$(losses "$W/alq")" "$(losses "$W/alqb")" 2e-2 &&
  ok "Qwen2-MoE all-linear (shared expert too) trains in fp32 and bf16 (within 2e-2)" || bad "Qwen2-MoE all-linear"
run mixtral "${AL[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 \
  --output_dir "$W/al1" && al1=$(losses "$W/al1") || al1="[]"
run mixtral "${AL[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 \
  --load_in_4bit --bnb_4bit_use_double_quant --output_dir "$W/alq4" && same "$al1" "$(losses "$W/alq4")" 2e-2 &&
  ok "QLoRA all-linear on Mixtral (adapters on NF4 experts) trains (within 2e-2 of LoRA's)" || bad "QLoRA all-linear"
run mixtral --max_steps 3 --save_strategy no --use_dora --output_dir "$W/dora" &&
  grep -q "lora_magnitude_vector" <(strings "$W/dora/adapter_model.safetensors" | head -50) &&
  ok "DoRA on the attention of a Mixtral trains and saves its magnitudes" || bad "DoRA on Mixtral"

if [ -n "$MPI" ]; then
  run mixtral --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 --output_dir "$W/one" &&
    one=$(losses "$W/one") || one="[]"
  # Each layout's run covers the same 8 sequences per step as the one-process run.
  for layout in "2 z3 --zero_stage 3 --gradient_accumulation_steps 2" \
    "2 ep --expert-model-parallel-size 2 --gradient_accumulation_steps 2" \
    "2 tp --tensor-model-parallel-size 2 --sequence-parallel --gradient_accumulation_steps 4" \
    "2 pp --pipeline-model-parallel-size 2 --gradient_accumulation_steps 4" \
    "2 cp --context-parallel-size 2 --gradient_accumulation_steps 4"; do
    set -- $layout; n=$1 name=$2; shift 2
    [ $name = ep ] || [ $name = tp ] || full || continue
    launch "$n" "$name" mixtral --max_steps 4 --save_strategy no --lora_dropout 0 "$@" &&
      same "$one" "$(losses "$W/$name")" 1e-5 && ok "Mixtral LoRA, $n ranks, $*: one process's losses" ||
      bad "Mixtral LoRA $*"
  done
  launch 2 q4ep mixtral --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 2 \
    --expert-model-parallel-size 2 --load_in_4bit --bnb_4bit_use_double_quant &&
    same "$(losses "$W/q4")" "$(losses "$W/q4ep")" 1e-5 && ok "QLoRA on Mixtral under EP 2: one process's losses" ||
    bad "QLoRA Mixtral EP 2"
  if full; then
    launch 2 q4tp mixtral --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 \
      --tensor-model-parallel-size 2 --load_in_4bit --bnb_4bit_use_double_quant &&
      same "$(losses "$W/q4")" "$(losses "$W/q4tp")" 2e-3 &&
      ok "QLoRA on Mixtral under TP 2: within 2e-3 of one process's (a rank's attention slices quantize alone)" ||
      bad "QLoRA Mixtral TP 2"
  fi
  for layout in "2 alep --expert-model-parallel-size 2 --gradient_accumulation_steps 2" \
    "2 altp --tensor-model-parallel-size 2 --sequence-parallel --gradient_accumulation_steps 4" \
    "2 alz3 --zero_stage 3 --gradient_accumulation_steps 2" \
    "2 alpp --pipeline-model-parallel-size 2 --gradient_accumulation_steps 4"; do
    set -- $layout; n=$1 name=$2; shift 2
    [ $name = alep ] || [ $name = altp ] || full || continue
    launch "$n" "$name" mixtral "${AL[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 "$@" &&
      same "$al1" "$(losses "$W/$name")" 1e-5 && ok "Mixtral all-linear, $n ranks, $*: one process's losses" ||
      bad "Mixtral all-linear $*"
  done
  # Qwen2-MoE under TP 2: the shared expert's adapters cut as a dense MLP's (gate / up column, down row).
  launch 2 alqtp qwen "${AL[@]}" --max_steps 3 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 \
    --tensor-model-parallel-size 2 --sequence-parallel &&
    run qwen "${AL[@]}" --max_steps 3 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 \
      --output_dir "$W/alq1" && same "$(losses "$W/alq1")" "$(losses "$W/alqtp")" 1e-5 &&
    ok "Qwen2-MoE all-linear (shared expert's adapters cut) under TP 2 + SP: one process's losses" ||
    bad "Qwen2-MoE all-linear TP 2"
  launch 2 alq4ep mixtral "${AL[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 2 \
    --expert-model-parallel-size 2 --load_in_4bit --bnb_4bit_use_double_quant &&
    same "$(losses "$W/alq4")" "$(losses "$W/alq4ep")" 1e-5 && ok "QLoRA all-linear under EP 2: one process's losses" ||
    bad "QLoRA all-linear EP 2"
  # Each EP rank holds its experts' adapters: the checkpoint resumes in one process.
  run mixtral "${AL[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0 --gradient_accumulation_steps 4 \
    --output_dir "$W/ale1" && ale1=$(losses "$W/ale1") || ale1="[]"
  launch 2 ale2 mixtral "${AL[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0 --gradient_accumulation_steps 2 \
    --expert-model-parallel-size 2 && same "$ale1" "$(losses "$W/ale2")" 1e-5 &&
    run mixtral "${AL[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0 --gradient_accumulation_steps 4 \
      --output_dir "$W/ale2" --resume_from_checkpoint "$W/ale2/checkpoint-3" && same "$ale1" "$(losses "$W/ale2")" 1e-5 &&
    ok "an expert-parallel all-linear checkpoint (experts' adapters on their ranks) resumes in one process" ||
    bad "EP all-linear resume"
  # Expert parallelism shards the frozen experts; the attention adapters are every rank's: its
  # checkpoint resumes in one process.
  run mixtral --max_steps 6 --save_steps 3 --lora_dropout 0 --gradient_accumulation_steps 4 --output_dir "$W/e1" &&
    e1=$(losses "$W/e1") || e1="[]"
  launch 2 e2 mixtral --max_steps 6 --save_steps 3 --lora_dropout 0 --gradient_accumulation_steps 2 \
    --expert-model-parallel-size 2 && same "$e1" "$(losses "$W/e2")" 1e-5 &&
    run mixtral --max_steps 6 --save_steps 3 --lora_dropout 0 --gradient_accumulation_steps 4 --output_dir "$W/e2" \
      --resume_from_checkpoint "$W/e2/checkpoint-3" && same "$e1" "$(losses "$W/e2")" 1e-5 &&
    ok "an expert-parallel LoRA checkpoint resumes in one process" || bad "EP LoRA resume"
fi

base=(train --model_name_or_path "$W/mixtral" --train_file "$W/t.bin" --max_steps 1 --model_max_length 32
  --output_dir "$W/e" --overwrite_output_dir --use_peft)
err "one expert's module alone" "in every expert or in none" "${base[@]}" --lora_target_modules q_proj,experts.0.w1
err "DoRA on the experts" "use_dora on a mixture-of-experts model's MLP module" "${base[@]}" --use_dora \
  --lora_target_modules all-linear
err "an unknown module lists the valid names" "valid names: q_proj, k_proj, v_proj, o_proj, gate, w1, w3, w2, all-linear" \
  "${base[@]}" --lora_target_modules q_proj,w4

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
