# lora_common.sh: the helpers tests/cli/lora.sh and lora_moe.sh share (sourced; they set Z, W, PY,
# HERE first): pass / fail counts, per-step losses from trainer_state.json, closeness of two loss lists
# and of two adapter folders, and the one-error-line check for bad input.
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok    $1"; }
bad() { fail=$((fail + 1)); echo "FAIL  $1"; }
losses() { $PY -c "import json,sys; print(json.dumps([e['loss'] for e in json.load(open(sys.argv[1]+'/trainer_state.json'))['log_history'] if 'loss' in e]))" "$1"; }
same() {  # same LOSSES_A LOSSES_B TOL
  $PY -c "import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2]); t=float(sys.argv[3]); sys.exit(0 if len(a)==len(b)>0 and all(abs(x-y)<=t*abs(y) for x,y in zip(a,b)) else 1)" "$1" "$2" "$3"
}
folders_close() {  # folders_close DIR_A DIR_B TOL: the same adapter tensors, elementwise within TOL
  HERE=$HERE $PY - "$1" "$2" "$3" <<'P'
import os, sys
sys.path.insert(0, os.path.join(os.environ["HERE"], "..", "parity"))
import hfmodels
a, b = (hfmodels.read_safetensors(os.path.join(d, "adapter_model.safetensors")) for d in sys.argv[1:3])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max(float((a[k] - b[k]).abs().max()) for k in a)
print(f"largest difference {worst:.2e}")
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
P
}
err() {  # err NAME PATTERN ARGS...: one "ztrain: error:" line matching PATTERN, non-zero exit
  local name=$1 pat=$2; shift 2
  "$Z" "$@" >"$W/e.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c 'ztrain: error:' "$W/e.out")" = 1 ] && grep -q -- "$pat" "$W/e.out"; then
    ok "bad input: $name"
  else
    bad "bad input: $name (rc $rc): $(cat "$W/e.out")"
  fi
}
