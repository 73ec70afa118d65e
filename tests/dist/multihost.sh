#!/usr/bin/env bash
# multihost.sh: two "hosts" on this machine as Linux network namespaces made by the test (a veth
# pair, addresses only inside them, OpenMPI's TCP transport, mpirun reaching the other namespace
# through plm_rsh_agent = a script that enters it, each namespace with its own host name).
# 1. ZeRO-2 data parallelism across the hosts (2 ranks each) equals the same run on one host.
# 2. Local SGD (--local_sgd_steps 4) with its groups found by host name; bytes across hosts per step.
# 3. The elastic agent (`ztrain launch --nnodes 1:2 --max_restarts 1`) runs the job on both; the
#    test kills one host (every process in it, then the namespace) after checkpoint-8; the agent
#    finds one host answering, restarts on it with 2 ranks and twice the gradient accumulation
#    (same global batch), resharding the 4-rank ZeRO-2 checkpoint, and the run completes with the
#    per-step losses of the uninterrupted run: equal bit for bit up to step 8, within 1e-6
#    relative after (the world size changed, so sums run in another order).
# Needs root and `ip netns` (exits 77, skipped, without them).
# usage: multihost.sh path/to/ztrain
set -u
Z=$1
PY=/usr/bin/python3
[ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns list >/dev/null 2>&1 || { echo "skip: needs root and ip netns"; exit 77; }
W=$(mktemp -d)
H1=zt$$a H2=zt$$b
cleanup() {
  for ns in $H1 $H2; do
    ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del $ns 2>/dev/null
  done
  rm -rf "$W"
}
trap cleanup EXIT
ip netns add $H1 && ip netns add $H2 || { echo "skip: cannot create network namespaces"; exit 77; }
ip link add ${H1}v type veth peer name ${H2}v || { echo "FAIL veth pair"; exit 1; }
ip link set ${H1}v netns $H1 && ip link set ${H2}v netns $H2
ip netns exec $H1 ip addr add 10.77.0.1/24 dev ${H1}v && ip netns exec $H2 ip addr add 10.77.0.2/24 dev ${H2}v
for ns in $H1 $H2; do ip netns exec $ns ip link set ${ns}v up; ip netns exec $ns ip link set lo up; done
# mpirun's rsh agent: called as `agent HOST command...` (what ssh would run remotely).
cat > "$W/agent.sh" <<A
#!/bin/sh
host=\$1; shift
case "\$host" in 10.77.0.1) ns=$H1 ;; 10.77.0.2) ns=$H2 ;; *) echo "agent: unknown host \$host" >&2; exit 255 ;; esac
# A host marked down does not answer (what ssh to a dead machine does).
[ -e "$W/down-\$ns" ] && { echo "agent: \$host is down" >&2; exit 255; }
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$ns; \$*"
A
chmod +x "$W/agent.sh"
printf "10.77.0.1 slots=2\n10.77.0.2 slots=2\n" > "$W/hosts"
MPI_ARGS="--mca plm_rsh_agent $W/agent.sh --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24"
# Everything below runs inside the first host's namespace, under its own host name.
on_h1() { ip netns exec $H1 unshare --uts /bin/sh -c "hostname $H1; exec \"\$@\"" sh "$@"; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$W/cfg.json" <<'J'
{"model_type": "gpt2", "vocab_size": 1024, "n_positions": 128, "n_embd": 128, "n_layer": 2, "n_head": 4}
J
$PY -c "
import random, sys; r = random.Random(11)
sys.stdout.buffer.write(b''.join(r.randrange(1024).to_bytes(2, 'little') for _ in range(400000)))" > "$W/tok.bin"
# ZT_TEST_SUBSET=sanitizers (scripts/test_sanitizers.sh): 20 steps, not 40 (the host is lost after
# checkpoint-8 either way; the restart still trains 12 steps on the remaining host).
steps=40
[ "${ZT_TEST_SUBSET:-}" = sanitizers ] && steps=20
args=(train --model_config_path "$W/cfg.json" --train_file "$W/tok.bin" --per_device_train_batch_size 2
      --gradient_accumulation_steps 1 --model_max_length 64 --max_steps $steps --save_steps 4 --logging_steps 1
      --learning_rate 2e-3 --report_to none --threads 1 --seed 5 --zero_stage 2)
losses() { $PY -c "import json,sys; print(json.dumps([e['loss'] for e in json.load(open(sys.argv[1]))['log_history'] if 'loss' in e]))" "$1/trainer_state.json"; }
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

# 1. Across the two hosts, and on one.
on_h1 "$Z" launch --nproc_per_node 2 --hostfile "$W/hosts" --mpirun_args "$MPI_ARGS" -- "${args[@]}" \
  --output_dir "$W/two" > "$W/two.log" 2>&1 || { bad "4 ranks on 2 hosts failed"; tail -n 8 "$W/two.log"; exit 1; }
"$Z" launch --nproc_per_node 4 -- "${args[@]}" --output_dir "$W/one" > "$W/one.log" 2>&1 ||
  { bad "4 ranks on one host failed"; tail -n 5 "$W/one.log"; exit 1; }
want=$(losses "$W/one")
if [ "$(losses "$W/two")" = "$want" ]; then ok "ZeRO-2 on 2 hosts x 2 ranks equals 4 ranks on one host ($steps steps)"
else bad "2 hosts vs one: $(losses "$W/two") vs $want"; fi

# 2. Local SGD across the hosts: groups found by host name (2 of 2 ranks), an fp32 all-reduce of the
#    parameters across hosts every 4 steps and nothing else (bytes per step against the formula).
on_h1 "$Z" launch --nproc_per_node 2 --hostfile "$W/hosts" --mpirun_args "$MPI_ARGS" -- "${args[@]}" \
  --zero_stage 0 --local_sgd_steps 4 --max_steps 12 --save_steps 12 --output_dir "$W/lsgd" > "$W/lsgd.log" 2>&1 ||
  { bad "local SGD on 2 hosts failed"; tail -n 8 "$W/lsgd.log"; }
if [ -f "$W/lsgd/trainer_state.json" ] && $PY - "$W/lsgd" <<'P'
import json, struct, sys
d = sys.argv[1]
with open(f"{d}/model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
P = sum(eval("*".join(map(str, v["shape"])) or "1") for k, v in header.items() if k != "__metadata__")
last = [e for e in json.load(open(f"{d}/trainer_state.json"))["log_history"] if "loss" in e][-1]
got, want = last["bytes_across_hosts_per_step"], 4 * P * 3 / 12
print(f"    local SGD, 2 hosts, H = 4: {got:.0f} bytes across hosts per step per rank (formula {want:.0f})")
sys.exit(0 if abs(got - want) <= 1e-6 * want else 1)
P
then ok "local SGD: hosts found by name, bytes across hosts per step = formula"
else bad "local SGD bytes across hosts"; fi

# 3. The agent loses a host after checkpoint-8.
on_h1 "$Z" launch --nproc_per_node 2 --hostfile "$W/hosts" --nnodes 1:2 --max_restarts 1 --mpirun_args "$MPI_ARGS" \
  -- "${args[@]}" --output_dir "$W/el" > "$W/el.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -d "$W/el/checkpoint-8" ] && break; sleep 0.05; done
t_kill=$(date +%s.%N)
# The host dies: it stops answering and every process in it is killed (the namespace, whose veth
# peer is the other host's interface, stays).
touch "$W/down-$H2"
ip netns pids $H2 | xargs -r kill -9
wait $pid; rc=$?
if [ $rc -eq 0 ] && grep -q "restart 1 of 1: 2 ranks on 1 host(s), gradient accumulation 2 (global batch 8)" "$W/el.log"; then
  got=$(losses "$W/el")
  if $PY - "$got" "$want" <<'P'
import json, sys
got, want = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert len(got) == len(want), (len(got), len(want))
worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
same = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), len(got))
print(f"    first differing step {same + 1}, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-6 and same >= 8 else 1)
P
  then ok "host killed after checkpoint-8: the agent continued on the other host (2 ranks, accumulation 2)"
  else bad "losses after the restart: $got vs $want"; fi
else
  bad "agent: exit $rc"; grep -E "^launch|invalid|if_inexclude|rror" "$W/el.log" | head -30
fi
exit $fail
