#!/usr/bin/env bash
# bench_id_check.sh: the per-batch token checks (issue 21) as a share of a training step. Times the
# checked and unchecked window copies (zt_bench_id_check) at a training run's geometry, and the
# run's own steps (median step_time_s of metrics.jsonl, steps 3..N), then prints cost / step.
# The loader fills batches on its own thread, ahead of the step, so the share of the step's wall
# time is at most this (it is hidden entirely while the loader keeps ahead).
# usage: bench_id_check.sh BUILD_DIR [CONFIG B T STEPS]   (default: the quickstart model, B 16 x T 128)
set -eu
BUILD=${1:-build}
CFG=${2:-$(dirname "$0")/../configs/quickstart-llama.json}
B=${3:-16}
T=${4:-128}
STEPS=${5:-12}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
V=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$CFG")
/usr/bin/python3 - "$W/t.bin" "$V" <<'P'
import random, struct, sys
r = random.Random(1); V = int(sys.argv[2]); n = 2_000_000
w = 2 if V <= 65536 else 4
toks = bytes().join(r.randrange(V).to_bytes(w, "little") for _ in range(n))
open(sys.argv[1], "wb").write(b"ZTTOKENS" + struct.pack("<IIQIi", 1, w, n, V, -1) + bytes(32) + toks)
P
echo "== fill cost (zt_bench_id_check $B $T $V)"
"$BUILD/zt_bench_id_check" "$B" "$T" "$V" 20000000 2000 | tee "$W/fill"
echo "== step time (ztrain train, $CFG, B $B x T $T, $STEPS steps)"
"$BUILD/ztrain" train --model_config_path "$CFG" --train_file "$W/t.bin" --per_device_train_batch_size "$B" \
  --model_max_length "$T" --max_steps "$STEPS" --output_dir "$W/out" --report_to none --save_strategy no \
  --logging_steps 1000 > "$W/log" 2>&1 || { cat "$W/log"; exit 1; }
/usr/bin/python3 - "$W/out/metrics.jsonl" "$W/fill" <<'P'
import json, re, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_time_s"' in l]
step = statistics.median(r["step_time_s"] for r in rows[2:])
print(f"median step {step * 1e3:.1f} ms over {len(rows) - 2} steps")
for line in open(sys.argv[2]):
    m = re.search(r"^\s+(.*?):\s+unchecked\s+([\d.]+)\s+checked\s+([\d.]+)\s+cost\s+(-?[\d.]+)", line)
    if m:
        cost = float(m.group(4)) * 1e-6
        print(f"{m.group(1)}: {cost * 1e6:.1f} us per micro-batch = {100 * cost / step:.4f}% of a step")
P
