"""fault_harness.py: what the fault-injection harnesses (chaos.py, preempt.py) share: the job
environment, a work folder with a model config and a random token file, the `ztrain train` flags of
their small runs, and the per-step losses a run logged."""
import json
import os
import random
import tempfile

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def workdir(prefix, cfg, tokens=200000):
    """A fresh folder with cfg.json (cfg) and tok.bin (random ids below its vocabulary); returns
    (folder, config path, token file path)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    cfg_path, tok = os.path.join(tmp, "cfg.json"), os.path.join(tmp, "tok.bin")
    json.dump(cfg, open(cfg_path, "w"))
    r = random.Random(3)
    open(tok, "wb").write(b"".join(r.randrange(cfg["vocab_size"]).to_bytes(2, "little") for _ in range(tokens)))
    return tmp, cfg_path, tok


def train_flags(cfg_path, tok, batch, steps, save_steps):
    """`ztrain train` and its flags for a small run logging every step (no --output_dir)."""
    return ["train", "--model_config_path", cfg_path, "--train_file", tok, "--per_device_train_batch_size",
            str(batch), "--model_max_length", "32", "--max_steps", str(steps), "--save_steps", str(save_steps),
            "--logging_steps", "1", "--learning_rate", "2e-3", "--report_to", "none", "--threads", "1", "--seed", "5"]


def losses(out):
    """The per-step losses of trainer_state.json's log history."""
    st = json.load(open(os.path.join(out, "trainer_state.json")))
    return [e["loss"] for e in st["log_history"] if "loss" in e]
