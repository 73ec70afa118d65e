#!/usr/bin/env python3
"""Preemption: SIGTERM at random moments, as a scheduler preempting a job does (Slurm and
Kubernetes signal every process of the job), N times; every stopped run must exit 0 with a line
naming the checkpoint of the step it was in, and the resumed runs together must log the per-step
losses of an uninterrupted run bit for bit (docs/fault-tolerance.md, issue 12's "Preemption").

Each trial trains a small Llama on 1 or 2 ranks (mpirun for 2) and sends SIGTERM after a random
delay to every rank (or, one trial in three, to one random rank only: the ranks agree on the step),
then resumes with --resume_from_checkpoint latest; a trial goes on being preempted until its run
completes, then its losses are compared.

usage: bench/preempt.py [--ztrain build/ztrain] [--signals 20] [--seed 1]
"""
import argparse
import os
import random
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import ENV, losses, train_flags, workdir  # noqa: E402

CFG = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def rank_pids(z, out):
    # The ranks only: mpirun's own command line names the output folder too, and SIGTERM to
    # mpirun aborts the job (docs/fault-tolerance.md: signal the ranks, or SIGUSR1 to mpirun).
    r = subprocess.run(["pgrep", "-f", f"^{z} train .*{out}( |$)"], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                     "ztrain"))
    ap.add_argument("--signals", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    z = os.path.abspath(a.ztrain)
    rng = random.Random(a.seed)
    env = ENV
    tmp, cfg, tok = workdir("preempt-", CFG)
    train = train_flags(cfg, tok, 4, 400, 50)

    def cmd(n, out, extra):
        base = [z, *train, "--output_dir", out, *extra]
        return base if n == 1 else ["mpirun", "-np", str(n), "--bind-to", "none", *base]

    refs, took = {}, {}
    for n in (1, 2):
        out = os.path.join(tmp, f"ref{n}")
        t0 = time.time()
        subprocess.run(cmd(n, out, []), env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        took[n] = time.time() - t0
        refs[n] = losses(out)
    print(f"uninterrupted runs: {took[1]:.1f} s (1 rank), {took[2]:.1f} s (2 ranks)", flush=True)
    sent, trial, failures = 0, 0, []
    while sent < a.signals:
        trial += 1
        n = rng.choice([1, 2])
        out = os.path.join(tmp, f"t{trial}")
        first = True
        while True:
            log = os.path.join(tmp, f"t{trial}.{sent}.log")
            extra = ["--overwrite_output_dir"] if first else ["--resume_from_checkpoint", "latest"]
            first = False
            p = subprocess.Popen(cmd(n, out, extra), env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
            signalled = None
            if sent < a.signals:
                time.sleep(rng.uniform(0.1, 0.9) * took[n])  # anywhere in the run: start-up, steps, saves
                pids = rank_pids(z, out) if p.poll() is None else []
                if pids:
                    targets = pids if (n == 1 or rng.random() < 2 / 3) else [rng.choice(pids)]
                    for q in targets:
                        try:
                            os.kill(q, signal.SIGTERM)
                        except ProcessLookupError:
                            pass
                    signalled = len(targets)
                    sent += 1
            rc = p.wait(timeout=600)
            text = open(log).read()
            m = re.search(r"stopped by SIGTERM after step (\d+) of \d+; saved (\S+)", text)
            if rc != 0:
                failures.append(f"trial {trial}: exit {rc} after SIGTERM to {signalled} rank(s), see {log}")
                break
            if m:
                step, folder = int(m.group(1)), m.group(2)
                if not os.path.isfile(os.path.join(folder, "checksums.json")) or not folder.endswith(f"-{step}"):
                    failures.append(f"trial {trial}: {folder} missing or not step {step}")
                    break
                print(f"trial {trial} ({n} rank(s)): SIGTERM to {signalled} rank(s) -> exit 0, saved {folder}",
                      flush=True)
                continue  # resume
            if signalled:
                print(f"trial {trial} ({n} rank(s)): SIGTERM during the last step or at the end -> finished",
                      flush=True)
            break
        if os.path.exists(os.path.join(out, "trainer_state.json")):
            same = losses(out) == refs[n]
            print(f"trial {trial}: {'losses equal the uninterrupted run bit for bit' if same else 'LOSSES DIFFER'}",
                  flush=True)
            if not same:
                failures.append(f"trial {trial}: losses differ from the uninterrupted run")
    print(f"{sent} SIGTERMs over {trial} trials; {len(failures)} failure(s)")
    for f in failures:
        print("  " + f)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
