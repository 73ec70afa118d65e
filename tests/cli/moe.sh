#!/usr/bin/env bash
# moe.sh: mixture-of-experts models at the command line (docs/moe.md). The published config.json of
# Mixtral-8x7B-v0.1, Qwen1.5-MoE-A2.7B and Qwen3-30B-A3B (tests/fixtures/configs) pass estimate-memory
# with their published parameter counts; a shrunk Mixtral trains with capacity-limited routing and the
# router z-loss, and its metrics.jsonl carries the auxiliary losses, the dropped assignments and each
# layer's tokens per expert; bf16 with full recomputation trains with bf16's routing and losses near
# fp32's; bad input (more experts per token than experts, the MoE flags on a dense model, what does not
# compose with experts yet) ends in one clear error line each.
# usage: moe.sh path/to/ztrain
set -u
Z=$1
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/../fixtures/configs
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; }

# The published totals: 46,702,792,704; 14,315,784,192; 30,532,122,624.
for want in "mixtral-8x7b-v0.1 46702.79M" "qwen1.5-moe-a2.7b 14315.78M" "qwen3-30b-a3b 30532.12M"; do
  set -- $want
  if "$Z" estimate-memory --model_config_path "$CFG/$1.json" | grep -q "$2 total params"; then ok "$1: $2 parameters"
  else bad "$1 is not $2 parameters"; fi
done

# Expert parallelism 8: a rank holds the dense 1605.63M and one expert per layer (45097.16M / 8).
if "$Z" estimate-memory --model_config_path "$CFG/mixtral-8x7b-v0.1.json" --expert-model-parallel-size 8 \
     --num_ranks 16 | grep -q "expert parallel 8: 7242.78M per rank"; then ok "mixtral-8x7b EP 8: 7242.78M per rank"
else bad "mixtral-8x7b EP 8 is not 7242.78M per rank"; fi

# A shrunk Mixtral (4 experts, top 2) and random tokens.
$PY - "$CFG/mixtral-8x7b-v0.1.json" "$W" <<'P'
import json, sys, random
c = json.load(open(sys.argv[1]))
c.update(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         num_local_experts=4, vocab_size=200, max_position_embeddings=64, output_router_logits=True)
json.dump(c, open(sys.argv[2] + "/mixtral.json", "w"))
json.dump(dict(c, num_experts_per_tok=5), open(sys.argv[2] + "/topk5.json", "w"))
json.dump(dict(c, num_local_experts=100000), open(sys.argv[2] + "/e100k.json", "w"))
json.dump({"model_type": "gpt2", "vocab_size": 200, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64},
          open(sys.argv[2] + "/gpt2.json", "w"))
random.seed(1)
open(sys.argv[2] + "/t.bin", "wb").write(bytes(b for _ in range(8000) for b in (random.randrange(200), 0)))
P
base=(--train_file "$W/t.bin" --per_device_train_batch_size 2 --model_max_length 16 --max_steps 3 --logging_steps 1
      --overwrite_output_dir --save_strategy no)
if "$Z" train --model_config_path "$W/mixtral.json" --output_dir "$W/run" "${base[@]}" --moe_capacity_factor 0.5 \
     --router_z_loss_coef 0.001 >"$W/log" 2>&1 &&
   $PY - "$W/run/metrics.jsonl" <<'P'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert len(rows) == 3, rows
for r in rows:
    load = r["moe_tokens_per_expert"]
    assert len(load) == 2 and all(len(l) == 4 for l in load), load
    assert all(sum(l) == 2 * 16 * 2 for l in load), load   # B T tokens x top-2 per layer
    assert r["moe_dropped"] > 0 and r["aux_loss"] > 0 and r["router_z_loss"] > 0, r
    assert len(r["moe_balance"]) == 2 and r["moe_max_balance"] >= 1, r
print("rows ok:", rows[-1]["aux_loss"], rows[-1]["moe_dropped"], rows[-1]["moe_tokens_per_expert"])
P
then ok "mixtral trains with --moe_capacity_factor 0.5 and the z-loss; metrics.jsonl has the router statistics"
else bad "mixtral training or its metrics"; cat "$W/log" | tail -5; fi

# bf16 with full recomputation (the MoE layer in fp32, rerun in backward): the same router statistics
# as bf16 without it, and losses within 2% of fp32's.
for v in "f32" "b16 --bf16" "b16r --bf16 --gradient_checkpointing"; do
  set -- $v; name=$1; shift
  "$Z" train --model_config_path "$W/mixtral.json" --output_dir "$W/p_$name" "${base[@]}" "$@" >"$W/log_$name" 2>&1 \
    || { bad "mixtral $name: exit $?"; tail -3 "$W/log_$name"; }
done
if $PY - "$W" <<'P'
import json, sys
rows = {n: [json.loads(l) for l in open(f"{sys.argv[1]}/p_{n}/metrics.jsonl") if '"loss"' in l] for n in ("f32", "b16", "b16r")}
for a, b in zip(rows["b16"], rows["b16r"]):
    assert a["loss"] == b["loss"] and a["moe_tokens_per_expert"] == b["moe_tokens_per_expert"], (a, b)
    assert a["aux_loss"] == b["aux_loss"], (a, b)
worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(rows["b16"], rows["f32"]))
assert len(rows["b16"]) == 3 and worst < 0.02, worst
print("bf16 vs fp32 worst loss difference", worst)
P
then ok "mixtral --bf16 with and without --gradient_checkpointing: identical losses and routing, within 2% of fp32"
else bad "mixtral bf16 / recomputation"; fi

# expect NAME PATTERN -- command...
expect() {
  local name=$1 pattern=$2; shift 3
  local err rc lines
  err=$("$@" 2>&1 >/dev/null); rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -q "^ztrain: error: .*$pattern"; then
    ok "$name: $err"
  else
    bad "$name (exit $rc, $lines lines): $err"
  fi
}
expect "top-k above the experts" "num_experts_per_tok (5) is larger than the number of experts" -- \
  "$Z" train --model_config_path "$W/topk5.json" --output_dir "$W/o1" "${base[@]}"
expect "more experts than the bound" "num_local_experts = 100000 is more than ztrain's 65536 experts per layer" -- \
  "$Z" train --model_config_path "$W/e100k.json" --output_dir "$W/o8" "${base[@]}"
expect "capacity on a dense model" "moe_capacity_factor applies to mixture-of-experts models" -- \
  "$Z" train --model_config_path "$W/gpt2.json" --output_dir "$W/o2" "${base[@]}" --moe_capacity_factor 1.25
expect "z-loss on a dense model" "router_z_loss_coef applies to mixture-of-experts models" -- \
  "$Z" train --model_config_path "$W/gpt2.json" --output_dir "$W/o3" "${base[@]}" --router_z_loss_coef 0.001
expect "estimate-memory EP not dividing the ranks" "expert-model-parallel-size 8 must divide --num_ranks 12" -- \
  "$Z" estimate-memory --model_config_path "$CFG/mixtral-8x7b-v0.1.json" --expert-model-parallel-size 8 --num_ranks 12
expect "IA3 on the experts" "peft_type ia3 on a mixture-of-experts model's MLP module" -- \
  "$Z" train --model_config_path "$W/mixtral.json" --output_dir "$W/o7" "${base[@]}" --use_peft --peft_type ia3 \
  --target_modules k_proj,w2 --feedforward_modules w2
expect "negative capacity" "moe_capacity_factor" -- \
  "$Z" train --model_config_path "$W/mixtral.json" --output_dir "$W/o6" "${base[@]}" --moe_capacity_factor -1
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
