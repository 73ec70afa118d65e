"""disttest.py: what the distributed equivalence tests (train_*_test.py) share: the MPI test
environment, the ok / FAIL lines and their tally, relative differences, the `ztrain train` command
of a tiny run (one process or under mpirun), and reading an F32 safetensors file."""
import json
import os
import struct
import subprocess

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", ZT_COMM_TIMEOUT_S="60")
failures = []
# ZT_TEST_SUBSET=sanitizers: set by scripts/test_sanitizers.sh only (docs/testing.md#sanitizer-run).
# Instrumented ranks train about 10x slower, and the sanitizers look for memory errors and UB in each
# code path, which a short run reaches as well as a long one, while the numeric equivalence at full
# length has run in the plain pass. There the train_*_test.py scripts train 6 steps, not 20
# (steps_and_save), and a layout case that runs for both models in the plain pass runs for one of
# them (sanitizer_cases), chosen so that each layout, schedule, ZeRO stage and checkpoint layout
# still runs at least once and each model keeps a share of them. The plain pass runs everything.
SANITIZER_SUBSET = os.environ.get("ZT_TEST_SUBSET") == "sanitizers"


def steps_and_save(full=(20, 10), short=(6, 3)):
    """(steps of a run, the step its checkpoint is saved and resumed at): full, or short under
    ZT_TEST_SUBSET=sanitizers."""
    return short if SANITIZER_SUBSET else full


def sanitizer_cases(cases, names, key=lambda case: case[0]):
    """cases, or under ZT_TEST_SUBSET=sanitizers only those whose name (key) is in names."""
    return [c for c in cases if not SANITIZER_SUBSET or key(c) in names]


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def mpi(mpirun, n):
    """The mpirun prefix of an n-rank run on this machine's shared cores."""
    return [mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none"]


def bad_input_args(zt, work, B):
    """A 2-step run's arguments for the bad-input cases (the model and the layout are the case's)."""
    return [zt, "train", "--train_file", os.path.join(work, "train.bin"), "--max_steps", "2", "--save_strategy", "no",
            "--report_to", "none", "--threads", "1", "--overwrite_output_dir", "--output_dir",
            os.path.join(work, "bad"), "--per_device_train_batch_size", str(B)]


def train(zt, mpirun, np, model_args, train_file, out, steps, B, T, acc, extra, common=()):
    """Runs `ztrain train` on np ranks (--no_shuffle, fp32 logging every step, no saves unless extra
    says so) and returns the CompletedProcess; a run that does not resume overwrites out."""
    args = [zt, "train", *model_args, "--train_file", train_file, "--max_steps", str(steps), "--save_strategy",
            "no", "--no_shuffle", "--model_max_length", str(T), "--per_device_train_batch_size", str(B),
            "--gradient_accumulation_steps", str(acc), "--learning_rate", "1e-3", "--weight_decay", "0.1",
            "--report_to", "none", "--logging_steps", "1", "--threads", "1", "--output_dir", out, *common, *extra]
    if "--resume_from_checkpoint" not in extra:
        args.append("--overwrite_output_dir")
    if np > 1:
        args = mpi(mpirun, np) + args
    return subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=240)


def step_history(out):
    """(trainer_state.json's per-step entries, train_results.json) of a finished run."""
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    res = json.load(open(os.path.join(out, "train_results.json")))
    hist = [h for h in state["log_history"] if "loss" in h and "train_loss" not in h]
    return hist, state, res


def read_safetensors(path):
    """name -> tuple of floats, from an F32 safetensors file (or a folder's model.safetensors, or
    its shards through model.safetensors.index.json)."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if not os.path.exists(os.path.join(path, "model.safetensors")) and os.path.exists(index):
            out = {}
            for name in sorted(set(json.load(open(index))["weight_map"].values())):
                out.update(read_safetensors(os.path.join(path, name)))
            return out
        path = os.path.join(path, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", v["dtype"]
        a, b = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out


def check_errors(cases, timeout=120):
    """Bad input: each (name, argv, want) must exit non-zero with every "error:" line containing want."""
    for name, args, want in cases:
        p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=timeout)
        lines = [line for line in (p.stdout + p.stderr).splitlines() if "error:" in line]
        check(p.returncode != 0 and lines and all(want in line for line in lines),
              f"bad input, {name}: exit {p.returncode}, error lines {lines[:1]}")
