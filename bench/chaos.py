#!/usr/bin/env python3
"""Chaos: random kill -9 against training jobs under the elastic agent; the run must always
complete, lose no checkpoint, and log the losses of an uninterrupted run bit for bit.

Each trial trains a small GPT-2 on 2 or 4 ranks under `ztrain launch --max_restarts` (saving every
few steps, optionally with --flash_checkpoint) and, while it runs, kills with SIGKILL at random
moments one of:
  rank   one rank process                  -> the agent restarts the job from the newest save
  job    the agent, mpirun and every rank  -> this harness restarts the agent (as a cluster's
                                              scheduler would), resuming from the newest save
  agent  the agent alone                   -> its mpirun and ranks go on without it or die;
                                              this harness restarts the agent as for `job`
Kills land anywhere: inside steps, inside checkpoint writes (saves come every 2 steps), inside
start-up and resume. At the end of a trial the per-step losses of trainer_state.json must equal
the uninterrupted run's, and every checkpoint-N folder left must load (`ztrain eval` reads it).

usage: bench/chaos.py [--ztrain build/ztrain] [--kills 100] [--ranks 2,4] [--seed 1] [--flash]
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_harness import ENV, losses, train_flags, workdir  # noqa: E402

CFG = {"model_type": "gpt2", "vocab_size": 512, "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4}


def pids_of(pattern):
    r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                     "ztrain"))
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills_per_trial", type=int, default=5)
    ap.add_argument("--flash", action="store_true", help="train with --flash_checkpoint")
    a = ap.parse_args()
    z = os.path.abspath(a.ztrain)
    rng = random.Random(a.seed)
    env = ENV
    tmp, cfg, tok = workdir("chaos-", CFG)
    train = train_flags(cfg, tok, 2, 60, 2)
    if a.flash:
        train.append("--flash_checkpoint")
    refs = {}
    for n in map(int, a.ranks.split(",")):
        out = os.path.join(tmp, f"ref{n}")
        subprocess.run([z, "launch", "--nproc_per_node", str(n), "--", *train, "--output_dir", out], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        refs[n] = losses(out)
    done = 0
    counts = {"rank": 0, "job": 0, "agent": 0}
    failures = []
    trial = 0
    while done < a.kills:
        trial += 1
        n = rng.choice(list(refs))
        out = os.path.join(tmp, f"t{trial}")
        log = open(os.path.join(tmp, f"t{trial}.log"), "w")
        base = [z, "launch", "--nproc_per_node", str(n), "--max_restarts", "1000", "--", *train, "--output_dir", out]
        def start():
            # As a cluster's scheduler restarts a job: from the newest save when there is one.
            has = os.path.isdir(out) and any(d.startswith("checkpoint-") and "." not in d for d in os.listdir(out))
            extra = ["--resume_from_checkpoint", "latest"] if has else ["--overwrite_output_dir"]
            return subprocess.Popen(base + extra, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        p = start()
        t_trial = time.time()
        for k in range(min(a.kills_per_trial, a.kills - done)):
            time.sleep(rng.uniform(0.05, 1.5))
            if p.poll() is not None:
                break
            kind = rng.choice(["rank", "rank", "job", "agent"])
            if kind == "rank":
                victims = [q for q in pids_of(f"^{z} train .*{out}( |$)")]
                if not victims:
                    continue
                os.kill(rng.choice(victims), signal.SIGKILL)
            elif kind == "job":
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                for q in pids_of(f"{out}( |$)"):
                    try:
                        os.kill(q, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.2)
                p = start()
            else:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
                time.sleep(0.3)
                for q in pids_of(f"{out}( |$)"):
                    try:
                        os.kill(q, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                p = start()
            counts[kind] += 1
            done += 1
        rc = p.wait(timeout=600)
        ok = rc == 0 and os.path.exists(os.path.join(out, "trainer_state.json")) and losses(out) == refs[n]
        if ok:
            for d in sorted(os.listdir(out)):
                if d.startswith("checkpoint-") and "." not in d:
                    e = subprocess.run([z, "eval", "--model_name_or_path", os.path.join(out, d), "--validation_file",
                                        tok, "--model_max_length", "32", "--max_eval_samples", "8", "--threads", "1"],
                                       env=env, capture_output=True, text=True)
                    if e.returncode != 0:
                        ok = False
                        failures.append(f"trial {trial}: {d} does not load: {e.stderr.strip()[-200:]}")
        else:
            failures.append(f"trial {trial} ({n} ranks): exit {rc}, see {log.name}")
        print(f"trial {trial}: {n} ranks, {done} kills so far ({counts}), {time.time() - t_trial:.1f} s, "
              f"{'ok' if ok else 'FAIL'}", flush=True)
    print(f"{done} kills over {trial} trials: {counts}; {len(failures)} failed trial(s)")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
