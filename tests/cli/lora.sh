#!/usr/bin/env bash
# lora.sh: LoRA runs end to end on a tiny random Llama (GQA) folder (the numbers against PyTorch are
# tests/parity/lora_parity.py's): recomputation changes nothing; an interrupted run with dropout
# resumes to the uninterrupted run's losses; TP 4 over 2 KV heads (LoRA, DoRA, IA3) and a GQA Phi-3 (fused
# qkv_proj) under TP 2 give one process's losses and folder; a checkpoint holds only the adapters and their optimizer
# state (adapter_model.safetensors + adapter_config.json, no base weights); bf16, QDoRA and an int8 base train; with mpirun, DDP and
# ZeRO-1/2/3 on 2 ranks give one process's losses; IA3 the same (recomputation, resume, bf16, NF4 base,
# ZeRO-3, 2 pipeline stages, TP 2 + SP), DoRA too (TP 2 + SP with dropout as well: losses, adapter folder,
# resume in one process); tensor parallel with sequence parallel and dropout gives one
# process's losses and its checkpoint resumes in one process; bad input is one clear error line each and a non-zero exit.
# usage: lora.sh path/to/ztrain [path/to/mpirun]
set -u
# The sanitizer pass (ZT_TEST_SUBSET=sanitizers, scripts/test_sanitizers.sh) runs each code path once:
# ZeRO-3 of the ZeRO stages, DoRA's ZeRO-3 of its layouts, IA3 and QDoRA under TP 2 only, Phi-3's LoRA
# only, no IA3 at TP 4 (the plain pass runs them all).
full() { [ "${ZT_TEST_SUBSET:-}" != sanitizers ]; }
Z=$1
MPI=${2:-}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lora_common.sh"

$PY "$HERE/../parity/make_model.py" --arch llama --vocab_size 300 --hidden_size 64 --n_layer 2 --n_head 4 \
  --n_kv_head 2 --ffn 176 --out "$W/model" --seed 3 --tokens "$W/t.bin" --num_tokens 6000 >/dev/null || exit 1
common=(--model_name_or_path "$W/model" --use_peft --lora_r 4 --lora_target_modules all-linear --train_file "$W/t.bin"
  --overwrite_output_dir --no_shuffle --logging_steps 1 --per_device_train_batch_size 2
  --gradient_accumulation_steps 2 --model_max_length 32 --learning_rate 1e-3)

run() { "$Z" train "${common[@]}" "$@" >"$W/last.out" 2>&1 || { cat "$W/last.out"; return 1; }; }
run --max_steps 6 --save_strategy no --lora_dropout 0.1 --output_dir "$W/a" && a=$(losses "$W/a") || a="[]"
run --max_steps 6 --save_strategy no --lora_dropout 0.1 --gradient_checkpointing --output_dir "$W/ar" &&
  same "$a" "$(losses "$W/ar")" 0 && ok "full recomputation gives the same losses (dropout on)" || bad "recomputation"
run --max_steps 6 --save_steps 3 --lora_dropout 0.1 --output_dir "$W/s" &&
  run --max_steps 6 --save_steps 3 --lora_dropout 0.1 --output_dir "$W/s" --resume_from_checkpoint "$W/s/checkpoint-3" &&
  same "$a" "$(losses "$W/s")" 0 && ok "resume from step 3 repeats the uninterrupted run's losses (dropout masks too)" ||
  bad "resume"
HERE=$HERE $PY - "$W/s/checkpoint-3" "$W/model" <<'P' && ok "a checkpoint holds the adapters and their optimizer state only" || bad "checkpoint contents"
import json, os, sys
ck, base = sys.argv[1], sys.argv[2]
files = set(os.listdir(ck))
assert {"adapter_model.safetensors", "adapter_config.json"} <= files and "model.safetensors" not in files, files
sys.path.insert(0, os.path.join(os.environ["HERE"], "..", "parity"))
import hfmodels
names = list(hfmodels.read_safetensors(os.path.join(ck, "adapter_model.safetensors")))
assert names and all(".lora_A." in n or ".lora_B." in n for n in names), names
for f in files:
    if f.startswith("state-"):
        pieces = json.loads(hfmodels.read_safetensors_metadata(os.path.join(ck, f))["pieces"])
        assert pieces and all(".lora_" in p["tensor"] for p in pieces.values()), pieces
assert json.load(open(os.path.join(ck, "adapter_config.json")))["r"] == 4
P
run --max_steps 3 --save_strategy no --lora_dropout 0 --bf16 --output_dir "$W/b" &&
  same "$(losses "$W/b")" "$(losses "$W/a" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)[:3]))")" 2e-2 &&
  ok "bf16 trains (losses within 2e-2 of fp32's)" || bad "bf16"
run --max_steps 3 --save_strategy no --lora_dropout 0 --load_in_4bit --bnb_4bit_use_double_quant --output_dir "$W/q" &&
  same "$(losses "$W/q")" "$(losses "$W/b")" 2e-2 && grep -q "QLoRA base: .* in NF4" "$W/last.out" &&
  ok "QLoRA (NF4 base, double quantization) trains (losses within 2e-2 of LoRA's)" || bad "QLoRA"

# IA3 (--peft_type ia3, PEFT's defaults: k_proj, v_proj, down_proj; down_proj's input scaled).
ia3=(--model_name_or_path "$W/model" --use_peft --peft_type ia3 --train_file "$W/t.bin" --overwrite_output_dir
  --no_shuffle --logging_steps 1 --per_device_train_batch_size 2 --gradient_accumulation_steps 2
  --model_max_length 32 --learning_rate 1e-2)
irun() { "$Z" train "${ia3[@]}" "$@" >"$W/last.out" 2>&1 || { cat "$W/last.out"; return 1; }; }
irun --max_steps 6 --save_strategy no --output_dir "$W/i" && i=$(losses "$W/i") || i="[]"
irun --max_steps 6 --save_strategy no --gradient_checkpointing --output_dir "$W/ir" && same "$i" "$(losses "$W/ir")" 0 &&
  ok "IA3: full recomputation gives the same losses" || bad "IA3 recomputation"
irun --max_steps 6 --save_steps 3 --output_dir "$W/is" &&
  irun --max_steps 6 --save_steps 3 --output_dir "$W/is" --resume_from_checkpoint "$W/is/checkpoint-3" &&
  same "$i" "$(losses "$W/is")" 0 && ok "IA3: resume from step 3 repeats the uninterrupted run's losses" ||
  bad "IA3 resume"
irun --max_steps 3 --save_strategy no --bf16 --output_dir "$W/ib" &&
  same "$(losses "$W/ib")" "$(losses "$W/i" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)[:3]))")" 2e-2 &&
  ok "IA3: bf16 trains (losses within 2e-2 of fp32's)" || bad "IA3 bf16"
irun --max_steps 3 --save_strategy no --load_in_4bit --output_dir "$W/iq" &&
  same "$(losses "$W/iq")" "$(losses "$W/ib")" 2e-2 && ok "IA3 on an NF4 base trains (within 2e-2 of IA3's)" ||
  bad "IA3 NF4"

# --load_in_8bit (bitsandbytes' Int8Params, row-wise int8): within 1e-4 of LoRA on the fp32 base.
run --max_steps 3 --save_strategy no --lora_dropout 0 --output_dir "$W/l0" &&
  run --max_steps 3 --save_strategy no --lora_dropout 0 --load_in_8bit --output_dir "$W/l8" &&
  grep -q "QLoRA base: .* in int8, .* = 1.0[0-9]* bytes each" "$W/last.out" &&
  same "$(losses "$W/l8")" "$(losses "$W/l0")" 1e-4 && ok "an int8 base (--load_in_8bit) trains within 1e-4 of fp32's" ||
  bad "int8 base"

# QDoRA (--use_dora --load_in_4bit): the magnitudes start at the NF4 rows' norms (PEFT's dequantized
# weight), so with B = 0 the first step is QLoRA's; recomputation exact with dropout.
run --use_dora --lora_dropout 0 --max_steps 3 --save_strategy no --load_in_4bit --bnb_4bit_use_double_quant \
  --output_dir "$W/dq" && same "$(losses "$W/dq" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)[:1]))")" \
  "$(losses "$W/q" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)[:1]))")" 1e-6 &&
  ok "QDoRA: the first step's loss is QLoRA's (magnitudes at the NF4 rows' norms)" || bad "QDoRA start"
run --use_dora --lora_dropout 0.1 --max_steps 3 --save_strategy no --load_in_4bit --output_dir "$W/dq1" &&
  run --use_dora --lora_dropout 0.1 --max_steps 3 --save_strategy no --load_in_4bit --gradient_checkpointing \
    --output_dir "$W/dq2" && same "$(losses "$W/dq1")" "$(losses "$W/dq2")" 0 &&
  ok "QDoRA with dropout: full recomputation gives the same losses" || bad "QDoRA recomputation"

# DoRA (--use_dora, dropout on: PEFT's dropout form).
drun() { run --use_dora --lora_dropout 0.1 "$@"; }
drun --max_steps 6 --save_strategy no --output_dir "$W/d" && d=$(losses "$W/d") || d="[]"
drun --max_steps 6 --save_strategy no --gradient_checkpointing --output_dir "$W/dr" && same "$d" "$(losses "$W/dr")" 0 &&
  ok "DoRA: full recomputation gives the same losses (dropout on)" || bad "DoRA recomputation"
drun --max_steps 6 --save_steps 3 --output_dir "$W/ds" &&
  drun --max_steps 6 --save_steps 3 --output_dir "$W/ds" --resume_from_checkpoint "$W/ds/checkpoint-3" &&
  same "$d" "$(losses "$W/ds")" 0 && ok "DoRA: resume from step 3 repeats the uninterrupted run's losses" ||
  bad "DoRA resume"
drun --max_steps 3 --save_strategy no --bf16 --output_dir "$W/db" &&
  same "$(losses "$W/db")" "$(losses "$W/d" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)[:3]))")" 2e-2 &&
  ok "DoRA: bf16 trains (losses within 2e-2 of fp32's)" || bad "DoRA bf16"

if [ -n "$MPI" ]; then
  run --use_dora --lora_dropout 0 --max_steps 4 --save_strategy no --gradient_accumulation_steps 4 --output_dir "$W/d1"
  for layout in "--zero_stage 3" "--pipeline-model-parallel-size 2"; do
    [ "$layout" = "--zero_stage 3" ] || full || continue
    "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --use_dora --lora_dropout 0 --max_steps 4 \
      --save_strategy no --gradient_accumulation_steps $((${layout##* } == 3 ? 2 : 4)) $layout --output_dir "$W/d2" \
      >"$W/d2.out" 2>&1 && same "$(losses "$W/d1")" "$(losses "$W/d2")" 1e-6 &&
      ok "DoRA, 2 ranks, $layout: one process's losses" || { bad "DoRA $layout"; tail -3 "$W/d2.out"; }
  done
  # DoRA under TP 2 + SP, dropout on (a row layer's weight rows are cut: their squared norms are summed
  # over the group, its magnitudes whole): one process's losses and adapter folder (magnitudes included),
  # and its checkpoint resumes in one process.
  "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --use_dora --lora_dropout 0.1 --max_steps 6 --save_steps 3 \
    --tensor-model-parallel-size 2 --sequence-parallel --output_dir "$W/dt" >"$W/dt.out" 2>&1 &&
    same "$d" "$(losses "$W/dt")" 1e-6 && ok "DoRA, tensor parallel 2 + sequence parallel, dropout on: one process's losses" ||
    { bad "DoRA tensor parallel"; tail -3 "$W/dt.out"; }
  HERE=$HERE $PY - "$W/d" "$W/dt" <<'P' && ok "DoRA under TP 2: the adapter folder equals one process's" || bad "DoRA TP adapter folder"
import os, sys
sys.path.insert(0, os.path.join(os.environ["HERE"], "..", "parity"))
import hfmodels
a, b = (hfmodels.read_safetensors(os.path.join(d, "adapter_model.safetensors")) for d in sys.argv[1:3])
assert sorted(a) == sorted(b) and any("lora_magnitude_vector" in k for k in a), (sorted(a), sorted(b))
worst = max(max(abs(x - y) for x, y in zip(a[k].reshape(-1).tolist(), b[k].reshape(-1).tolist())) for k in a)
print(f"largest difference {worst:.2e}")
assert worst <= 1e-5, worst
P
  # 4 ranks, TP 2 x ZeRO-3 (each rank draws its shard's magnitudes: the row layers' norms summed over TP).
  "$Z" launch --nproc_per_node 4 -- train "${common[@]}" --use_dora --lora_dropout 0 --max_steps 4 --save_strategy no \
    --gradient_accumulation_steps 2 --tensor-model-parallel-size 2 --zero_stage 3 --output_dir "$W/dz" >"$W/dz.out" 2>&1 &&
    same "$(losses "$W/d1")" "$(losses "$W/dz")" 1e-6 && ok "DoRA, 4 ranks, TP 2 x ZeRO-3: one process's losses" ||
    { bad "DoRA TP x ZeRO-3"; tail -3 "$W/dz.out"; }
  drun --max_steps 6 --save_steps 3 --output_dir "$W/dt" --resume_from_checkpoint "$W/dt/checkpoint-3" &&
    same "$d" "$(losses "$W/dt")" 1e-6 && ok "DoRA: a tensor-parallel checkpoint resumes in one process" ||
    bad "DoRA TP resume"
  irun --max_steps 4 --save_strategy no --gradient_accumulation_steps 4 --output_dir "$W/i1"
  # ZeRO-3 splits the batch over 2 ranks (2 micro-batches each); the others see all 4 on both.
  for layout in "2 --zero_stage 3" "4 --pipeline-model-parallel-size 2" \
    "4 --tensor-model-parallel-size 2 --sequence-parallel"; do
    [ "${layout#* }" = "--tensor-model-parallel-size 2 --sequence-parallel" ] || full || continue
    "$Z" launch --nproc_per_node 2 -- train "${ia3[@]}" --max_steps 4 --save_strategy no \
      --gradient_accumulation_steps $layout --output_dir "$W/i2" >"$W/i2.out" 2>&1 &&
      same "$(losses "$W/i1")" "$(losses "$W/i2")" 1e-6 && ok "IA3, 2 ranks, ${layout#* }: one process's losses" ||
      { bad "IA3 $layout"; tail -3 "$W/i2.out"; }
  done
  # QDoRA on 2 ranks: under TP 2 a row layer's NF4 slices give partial squared norms (summed over the
  # group), under ZeRO-3 each rank starts its shard's magnitudes; with B = 0 the first step is QLoRA's
  # under the same layout either way.
  for layout in "--tensor-model-parallel-size 2" "--zero_stage 3"; do
    [ "$layout" = "--tensor-model-parallel-size 2" ] || full || continue
    for v in qlora "qdora --use_dora"; do
      set -- $v; name=$1; shift
      "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --lora_dropout 0 --max_steps 2 --save_strategy no \
        --load_in_4bit $layout "$@" --output_dir "$W/$name" >"$W/$name.out" 2>&1 || { tail -3 "$W/$name.out"; }
    done
    first() { losses "$1" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)[:1]))"; }
    same "$(first "$W/qdora")" "$(first "$W/qlora")" 1e-6 && ok "QDoRA, 2 ranks, $layout: the first step is QLoRA's" ||
      bad "QDoRA $layout"
  done
fi

if [ -n "$MPI" ]; then
  run --max_steps 4 --save_strategy no --lora_dropout 0 --per_device_train_batch_size 4 --output_dir "$W/one"
  one=$(losses "$W/one")
  for zs in 0 1 2 3; do
    [ $zs = 3 ] || full || continue
    "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 \
      --zero_stage $zs --output_dir "$W/z$zs" >"$W/z$zs.out" 2>&1 && same "$one" "$(losses "$W/z$zs")" 1e-6 &&
      ok "2 ranks, ZeRO stage $zs (0 = DDP): one process's losses within 1e-6" || { bad "ZeRO $zs"; tail -3 "$W/z$zs.out"; }
  done
  # Tensor parallel (2 ranks, sequence parallel, dropout on: masks numbered as the whole layer's):
  # one process's losses; its checkpoint resumes in one process.
  run --max_steps 6 --save_steps 3 --lora_dropout 0.1 --output_dir "$W/t1" && t1=$(losses "$W/t1") || t1="[]"
  "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0.1 \
    --tensor-model-parallel-size 2 --sequence-parallel --output_dir "$W/t2" >"$W/t2.out" 2>&1 &&
    same "$t1" "$(losses "$W/t2")" 1e-6 && ok "tensor parallel 2 + sequence parallel, dropout on: one process's losses" ||
    { bad "tensor parallel"; tail -3 "$W/t2.out"; }
  run --max_steps 4 --save_strategy no --lora_dropout 0 --output_dir "$W/c1"
  "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 \
    --context-parallel-size 2 --output_dir "$W/c2" >"$W/c2.out" 2>&1 && same "$(losses "$W/c1")" "$(losses "$W/c2")" 1e-6 &&
    ok "context parallel 2: one process's losses" || { bad "context parallel"; tail -3 "$W/c2.out"; }
  run --max_steps 6 --save_steps 3 --lora_dropout 0.1 --output_dir "$W/t2" --resume_from_checkpoint "$W/t2/checkpoint-3" &&
    same "$t1" "$(losses "$W/t2")" 1e-6 && ok "a tensor-parallel checkpoint resumes in one process" || bad "TP resume"
  # More TP ranks (4) than KV heads (2): each pair of ranks holds the same k / v rows of B (DoRA's
  # magnitudes, IA3's vectors), their gradients summed over the pair: one process's losses and folder.
  "$Z" launch --nproc_per_node 4 -- train "${common[@]}" --max_steps 6 --save_steps 3 --lora_dropout 0.1 \
    --tensor-model-parallel-size 4 --output_dir "$W/t4" >"$W/t4.out" 2>&1 && same "$t1" "$(losses "$W/t4")" 1e-6 &&
    folders_close "$W/t1" "$W/t4" 1e-5 && ok "TP 4 over 2 KV heads, dropout on: one process's losses and adapter folder" ||
    { bad "TP 4 over 2 KV heads"; tail -3 "$W/t4.out"; }
  run --max_steps 6 --save_steps 3 --lora_dropout 0.1 --output_dir "$W/t4" --resume_from_checkpoint "$W/t4/checkpoint-3" &&
    same "$t1" "$(losses "$W/t4")" 1e-6 && ok "TP 4 over 2 KV heads: its checkpoint resumes in one process" ||
    bad "TP 4 resume"
  "$Z" launch --nproc_per_node 4 -- train "${common[@]}" --use_dora --lora_dropout 0.1 --max_steps 6 --save_strategy no \
    --tensor-model-parallel-size 4 --output_dir "$W/dt4" >"$W/dt4.out" 2>&1 && same "$d" "$(losses "$W/dt4")" 1e-6 &&
    folders_close "$W/d" "$W/dt4" 1e-5 && ok "DoRA, TP 4 over 2 KV heads: one process's losses and folder" ||
    { bad "DoRA TP 4"; tail -3 "$W/dt4.out"; }
  if full; then
    "$Z" launch --nproc_per_node 4 -- train "${ia3[@]}" --max_steps 6 --save_strategy no --tensor-model-parallel-size 4 \
      --output_dir "$W/it4" >"$W/it4.out" 2>&1 && same "$i" "$(losses "$W/it4")" 1e-6 &&
      folders_close "$W/i" "$W/it4" 1e-5 && ok "IA3, TP 4 over 2 KV heads: one process's losses and folder" ||
      { bad "IA3 TP 4"; tail -3 "$W/it4.out"; }
  fi
  # Phi-3 with grouped-query attention (4 heads, 2 KV heads) under TP 2: a rank holds rows of each of
  # the fused qkv_proj's parts (q, k, v, of unequal sizes) and of gate_up_proj's two.
  $PY "$HERE/../parity/make_model.py" --config "$HERE/../fixtures/configs/phi3-mini-128k.json" --vocab_size 300 \
    --hidden_size 64 --n_layer 2 --n_head 4 --n_kv_head 2 --ffn 128 --out "$W/phi3" --seed 3 --rope_scaling \
    '{"type": "longrope", "short_factor": [1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7], "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]}' \
    >/dev/null
  for v in "lora --lora_dropout 0.1" "dora --lora_dropout 0.1 --use_dora" \
    "ia3 --peft_type ia3 --target_modules qkv_proj,down_proj --feedforward_modules down_proj --learning_rate 1e-2"; do
    set -- $v; name=$1; shift
    [ $name = lora ] || full || continue
    phi=(train --model_name_or_path "$W/phi3" --use_peft --train_file "$W/t.bin" --overwrite_output_dir --no_shuffle
      --logging_steps 1 --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --model_max_length 32
      --max_steps 6 --save_steps 3 "$@")
    "$Z" "${phi[@]}" --output_dir "$W/ph1" >"$W/ph1.out" 2>&1 &&
      "$Z" launch --nproc_per_node 2 -- "${phi[@]}" --tensor-model-parallel-size 2 --output_dir "$W/ph2" \
        >"$W/ph2.out" 2>&1 && same "$(losses "$W/ph1")" "$(losses "$W/ph2")" 1e-6 &&
      folders_close "$W/ph1" "$W/ph2" 1e-5 && "$Z" "${phi[@]}" --output_dir "$W/ph2" \
        --resume_from_checkpoint "$W/ph2/checkpoint-3" >"$W/ph3.out" 2>&1 && same "$(losses "$W/ph1")" "$(losses "$W/ph2")" 1e-6 &&
      ok "Phi-3 (GQA, fused qkv_proj / gate_up_proj) $name under TP 2: one process's losses and folder, resumed in one" ||
      { bad "Phi-3 $name TP 2"; tail -3 "$W/ph2.out"; }
  done
  "$Z" launch --nproc_per_node 4 -- train --model_name_or_path "$W/phi3" --use_peft --train_file "$W/t.bin" \
    --max_steps 1 --model_max_length 32 --output_dir "$W/ph4" --tensor-model-parallel-size 4 >"$W/ph4.out" 2>&1
  [ $? -ne 0 ] && grep -q "LoRA on a Phi-3 under tensor parallelism with more ranks (4) than key/value heads" "$W/ph4.out" &&
    ok "bad input: Phi-3 LoRA with more TP ranks than KV heads is one clear error" || bad "Phi-3 TP 4 refusal"
  run --max_steps 4 --save_strategy no --lora_dropout 0 --gradient_accumulation_steps 4 --output_dir "$W/pp1"
  "$Z" launch --nproc_per_node 2 -- train "${common[@]}" --max_steps 4 --save_strategy no --lora_dropout 0 \
    --gradient_accumulation_steps 4 --pipeline-model-parallel-size 2 --output_dir "$W/pp2" >"$W/pp2.out" 2>&1 &&
    same "$(losses "$W/pp1")" "$(losses "$W/pp2")" 1e-9 && ok "2 pipeline stages (1F1B): one process's losses" ||
    { bad "pipeline"; tail -3 "$W/pp2.out"; }
fi

base=(train --model_name_or_path "$W/model" --train_file "$W/t.bin" --max_steps 1 --model_max_length 32
  --output_dir "$W/e" --overwrite_output_dir)
err "unknown target module lists the valid names" "valid names: q_proj, k_proj, v_proj, o_proj, gate_proj" \
  "${base[@]}" --use_peft --lora_target_modules q_proj,qkv
err "--lora_r 0" "rank must be at least 1" "${base[@]}" --use_peft --lora_r 0
err "a LoRA flag without --use_peft" "add --use_peft" "${base[@]}" --lora_r 8
err "--load_in_4bit without --use_peft" "add --use_peft" "${base[@]}" --load_in_4bit
err "--bnb_4bit_quant_type fp4 is refused" "fp4 is not supported" "${base[@]}" --use_peft --load_in_4bit \
  --bnb_4bit_quant_type fp4
err "--bnb_4bit_compute_dtype against the run's precision" "differs from the run's GEMM dtype" "${base[@]}" \
  --use_peft --load_in_4bit --bnb_4bit_compute_dtype bfloat16
err "--load_in_8bit without --use_peft" "add --use_peft" "${base[@]}" --load_in_8bit
err "--load_in_8bit with --load_in_4bit" "pick one" "${base[@]}" --use_peft --load_in_8bit --load_in_4bit
err "IA3: a feedforward module that is not a target" "must be a subset of --target_modules" "${base[@]}" \
  --use_peft --peft_type ia3 --target_modules k_proj,v_proj --feedforward_modules down_proj
err "IA3: a feedforward module inside a fused GEMM" "cannot be scaled alone" "${base[@]}" --use_peft \
  --peft_type ia3 --target_modules up_proj,down_proj --feedforward_modules up_proj
err "IA3: a LoRA flag" "applies to LoRA adapters, not --peft_type ia3" "${base[@]}" --use_peft --peft_type ia3 \
  --lora_r 8
err "--peft_type prefix is refused" "ztrain trains lora and ia3" "${base[@]}" --use_peft --peft_type prefix
err "estimate-memory: a LoRA flag without --use_peft" "add --use_peft" estimate-memory --model_name_or_path \
  "$W/model" --lora_r 8
err "estimate-memory: an unknown target module lists the valid ones" "valid names: q_proj" estimate-memory \
  --model_name_or_path "$W/model" --use_peft --lora_target_modules qkv
"$Z" estimate-memory --model_name_or_path "$W/model" --use_peft --lora_r 4 --lora_target_modules all-linear \
  --load_in_4bit --bnb_4bit_use_double_quant --model_max_length 32 >"$W/est.out" 2>&1 &&
  grep -q "LoRA r 4: 0.01M trainable adapter params; the frozen base .* on every rank (NF4 linear weights)" "$W/est.out" &&
  ok "estimate-memory --use_peft --load_in_4bit counts the adapters and the NF4 base" ||
  bad "estimate-memory LoRA: $(cat "$W/est.out")"
# An adapter for a different base: the same modules at another rank's shapes.
mkdir -p "$W/other"
$PY - "$W/a" "$W/other" <<'P'
import json, sys
c = json.load(open(sys.argv[1] + "/adapter_config.json")); c["r"] = 8
json.dump(c, open(sys.argv[2] + "/adapter_config.json", "w"))
P
cp "$W/a/adapter_model.safetensors" "$W/other/"
err "an adapter for a different base names the tensor and both shapes" "has shape \[4,64\] but .* needs \[8,64\]" \
  "${base[@]}" --adapter_name_or_path "$W/other"
err "merge-adapter of a mismatched adapter" "has shape" merge-adapter --model_name_or_path "$W/model" \
  --adapter_name_or_path "$W/other" --output_dir "$W/m"
err "resume with another rank" "differ from this run's" train "${common[@]}" --lora_r 8 --max_steps 6 \
  --output_dir "$W/s" --resume_from_checkpoint "$W/s/checkpoint-3"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
