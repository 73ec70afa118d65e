#!/usr/bin/env bash
# bad_input.sh: every kind of bad input the core issue names must end in one clear
# error line on stderr ("ztrain: error: ...") and a non-zero exit below 128 (no crash).
# usage: bad_input.sh path/to/ztrain
set -u
Z=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
pass=0; fail=0
PY=/usr/bin/python3

# A tiny valid model folder and token files, made with ztrain itself.
cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 200, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64}
J
$PY -c "import sys; sys.stdout.buffer.write(bytes([i % 200 if j == 0 else 0 for i in range(4000) for j in (0, 1)]))" > "$W/ok.bin"
$PY -c "import sys; sys.stdout.buffer.write(bytes([5, 0] * 100 + [250, 0] + [5, 0] * 100))" > "$W/badid.bin"
$PY -c "import sys; sys.stdout.buffer.write(bytes([5, 0] * 40))" > "$W/short.bin"
"$Z" train --model_config_path "$W/cfg.json" --train_file "$W/ok.bin" --output_dir "$W/model" --max_steps 1 \
  --per_device_train_batch_size 2 --model_max_length 16 >/dev/null 2>&1 || { echo "could not make the model"; exit 1; }

base=(--train_file "$W/ok.bin" --per_device_train_batch_size 2 --model_max_length 16 --max_steps 1 --overwrite_output_dir)

# expect NAME PATTERN -- command...
expect() {
  local name=$1 pattern=$2; shift 3
  local err rc lines
  err=$("$@" 2>&1 >/dev/null); rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -q "^ztrain: error: .*$pattern"; then
    pass=$((pass + 1)); echo "ok    $name: $err"
  else
    fail=$((fail + 1)); echo "FAIL  $name (exit $rc, $lines lines): $err"
  fi
}

mkdir -p "$W/noweights" && cp "$W/model/config.json" "$W/noweights/"
expect "missing weight file" "model.safetensors" -- "$Z" train --model_name_or_path "$W/noweights" --output_dir "$W/o1" "${base[@]}"
mkdir -p "$W/trunc" && cp "$W/model/config.json" "$W/trunc/"
head -c 20000 "$W/model/model.safetensors" > "$W/trunc/model.safetensors"
expect "truncated weight file" "truncated" -- "$Z" train --model_name_or_path "$W/trunc" --output_dir "$W/o2" "${base[@]}"
mkdir -p "$W/notst" && cp "$W/model/config.json" "$W/notst/" && echo "hello, I am a text file" > "$W/notst/model.safetensors"
expect "non-safetensors weight file" "not a safetensors file" -- "$Z" train --model_name_or_path "$W/notst" --output_dir "$W/o3" "${base[@]}"
mkdir -p "$W/nofield" && cp "$W/model/model.safetensors" "$W/nofield/"
$PY -c "import json; c = json.load(open('$W/model/config.json')); del c['n_head']; json.dump(c, open('$W/nofield/config.json', 'w'))"
expect "config.json missing a field" '"n_head"' -- "$Z" train --model_name_or_path "$W/nofield" --output_dir "$W/o4" "${base[@]}"
expect "token id >= vocab size" "token id 250 at position 100" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o5" "${base[@]}" --train_file "$W/badid.bin"
expect "data shorter than one batch" "fewer than one optimizer step" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o6" "${base[@]}" --train_file "$W/short.bin" --model_max_length 32
expect "sequence longer than the context" "exceeds the model's context of 64" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o7" "${base[@]}" --model_max_length 128
expect "unknown flag" "did you mean --learning_rate" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o8" "${base[@]}" --learnig_rate 1e-3
expect "malformed flag value" "expects a number" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o9" "${base[@]}" --learning_rate abc
expect "missing flag value" "needs a value" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o10" "${base[@]}" --seed
expect "unknown command" "unknown command" -- "$Z" trian
expect "zero stage out of range" "--zero_stage expects an integer in \[0, 3\], got \"5\"" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o11" "${base[@]}" --zero_stage 5
expect "qwZ without ZeRO-3" "needs --zero_stage 3" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o12" "${base[@]}" --zero_stage 2 --zero_quantized_weights
expect "hybrid group not dividing" "must divide the number of ranks" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o13" "${base[@]}" --zero_stage 3 --zero_hpz_partition_size 2
# Flag values outside their ranges (every flag is swept by flag_sweep.py; these are the issue's).
expect "eval batch size 0" "--per_device_eval_batch_size expects an integer in \[1, 1048576\], got \"0\"" -- "$Z" eval --model_name_or_path "$W/model" --validation_file "$W/ok.bin" --per_device_eval_batch_size 0
expect "adam_beta1 above 1" "--adam_beta1 expects a number in \[0, 1), got \"1.5\"" -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o16" "${base[@]}" --adam_beta1 1.5
expect "min_new_tokens above max_new_tokens" "--min_new_tokens 9 exceeds --max_new_tokens 5" -- "$Z" generate --model_name_or_path "$W/model" --max_new_tokens 5 --min_new_tokens 9
expect "unknown optimizer" 'did you mean adamw_8bit?' -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o17" "${base[@]}" --optim adamw8bit
expect "optimizer argument it does not take" 'key "rho" is not used by --optim lion_32bit' -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o18" "${base[@]}" --optim lion --optim_args rho=0.1
expect "malformed optim_args" 'is not key=value' -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o19" "${base[@]}" --optim sgd --optim_args momentum
expect "plot of a folder without a training log" 'trainer_state.json: No such file' -- "$Z" plot --runs "$W/nothere" --output "$W/p.png"
expect "plot with labels for other runs" '--labels has 1 names for 2 runs' -- "$Z" plot --runs "$W/a,$W/b" --labels x --output "$W/p.png"
expect "unknown optimizer state dtype" '--optim_state_dtype "fp8" is not known' -- "$Z" train --model_name_or_path "$W/model" --output_dir "$W/o20" "${base[@]}" --optim_state_dtype fp8

# Absurd sizes fail before allocating anything large: a 16M-layer config is rejected by the config
# checks (ulimit -v keeps a regression from holding gigabytes here: it would end in bad_alloc), and
# a model larger than this machine's memory (3.3e12 parameters) by the memory check, which names
# the estimate and the memory available.
# Not under AddressSanitizer (ASAN_OPTIONS set by scripts/test_sanitizers.sh): its shadow memory
# reserves terabytes of address space, which any such limit refuses.
ulim() { if [ -n "${ASAN_OPTIONS:-}" ]; then "$@"; else (ulimit -v 3000000; exec "$@"); fi; }
$PY -c "import json; c = json.load(open('$W/cfg.json')); c['n_layer'] = 16777216; json.dump(c, open('$W/deep.json', 'w'))"
expect "absurd n_layer (train)" '"n_layer" must be a positive integer up to 65536' -- ulim "$Z" train --model_config_path "$W/deep.json" --output_dir "$W/o14" "${base[@]}"
expect "absurd n_layer (estimate-memory)" '"n_layer" must be a positive integer up to 65536' -- ulim "$Z" estimate-memory --model_config_path "$W/deep.json"
mkdir -p "$W/huge"
cat > "$W/huge/config.json" <<'J'
{"model_type": "gpt2", "vocab_size": 50257, "n_embd": 65536, "n_layer": 64, "n_head": 64, "n_positions": 64}
J
mem='needs an estimated [0-9.]* [TPGM]iB.* but only [0-9.]* [TPGM]iB is available'
expect "model larger than memory (train)" "$mem" -- ulim "$Z" train --model_config_path "$W/huge/config.json" --output_dir "$W/o15" "${base[@]}"
expect "model larger than memory (eval)" "$mem" -- ulim "$Z" eval --model_name_or_path "$W/huge" --validation_file "$W/ok.bin" --model_max_length 16
expect "model larger than memory (generate)" "$mem" -- ulim "$Z" generate --model_name_or_path "$W/huge" --prompt hi
# LR schedules: HF's --lr_scheduler_kwargs (docs/training.md#lr-schedules).
expect "wsd without num_decay_steps" "needs num_decay_steps" -- "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o16" "${base[@]}" --lr_scheduler_type warmup_stable_decay
expect "unknown scheduler kwarg" 'key "num_decay_step" is not used by warmup_stable_decay.*did you mean num_decay_steps' -- "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o16" "${base[@]}" --lr_scheduler_type warmup_stable_decay --lr_scheduler_kwargs '{"num_decay_step": 1}'
expect "scheduler kwargs not JSON" "not valid JSON" -- "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o16" "${base[@]}" --lr_scheduler_type cosine --lr_scheduler_kwargs 'num_cycles=1'
expect "cosine_with_min_lr without a minimum" "needs min_lr or min_lr_rate" -- "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o16" "${base[@]}" --lr_scheduler_type cosine_with_min_lr
# Kernel levels and the MFU peak (docs/kernels.md#dispatch, docs/observability.md#mfu).
expect "unknown ZT_ISA" 'unknown ZT_ISA "avx9000"; choose auto or one of: ' -- env ZT_ISA=avx9000 "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o17" "${base[@]}"
missing=$($PY - "$Z" <<'P'
import subprocess, sys
# A level this build knows but this CPU lacks, if any (an AVX2-only CPU lacks avx512).
known = {"x86_64": ["avx512_bf16", "avx512", "avx2"], "aarch64": ["sve2", "sve", "neon"]}
import platform
for lvl in known.get(platform.machine(), []):
    r = subprocess.run([sys.argv[1], "train", "--help"], env={"ZT_ISA": lvl}, capture_output=True, text=True)
    if "does not have" in r.stderr:
        print(lvl); break
P
)
if [ -n "$missing" ]; then
  expect "forced ISA the CPU lacks ($missing)" "ZT_ISA=$missing asks for instructions this CPU .* does not have" -- env ZT_ISA=$missing "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o17" "${base[@]}"
else
  echo "ok    forced ISA the CPU lacks: this CPU has every level this build knows"
fi
expect "--peak_gflops 0" "peak_gflops" -- "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o17" "${base[@]}" --peak_gflops 0
expect "--peak_gflops negative" "peak_gflops" -- "$Z" train --model_config_path "$W/cfg.json" --output_dir "$W/o17" "${base[@]}" --peak_gflops -5
# A tokenizer.model that is not a SentencePiece model (Llama 3's tiktoken-format file has the name too).
mkdir -p "$W/spm" "$W/text" && printf 'IQ== 0\nIg== 1\n' > "$W/spm/tokenizer.model" && echo "some text" > "$W/text/a.txt"
expect "tokenizer.model not SentencePiece" "spm/tokenizer.model: not a SentencePiece model" -- "$Z" tokenize --tokenizer_name_or_path "$W/spm" --input "$W/text" --output_dir "$W/tok"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
