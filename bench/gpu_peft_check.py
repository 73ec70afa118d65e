#!/usr/bin/env python3
"""gpu_peft_check.py: PEFT loads ztrain's adapter folders (issue 24's real-client check).

Reads DIR/<case>/{model, adapter, reference.npz} as `tests/parity/lora_parity.py --pack DIR` left
them (bench/gpu_pack.sh runs it): a random HF folder, the adapter folder ztrain trained on it, and the
adapter-applied logits of ztrain's PyTorch transcription on a fixed batch (equal to ztrain's within
1e-7 in the parity test). Here, with transformers and peft installed (the device machine):
AutoModelForCausalLM.from_pretrained(model) + PeftModel.from_pretrained(adapter) must give those
logits (max relative difference <= 1e-4: another library's kernels, fp32), and so must
merge_and_unload(). Prints one line per case and the versions; exit status = cases that failed.
usage: python3 bench/gpu_peft_check.py .gpu/peft
"""
import os
import sys

import numpy as np
import torch


def check(case_dir):
    import transformers
    from peft import PeftModel
    ref = np.load(os.path.join(case_dir, "reference.npz"))
    x = torch.from_numpy(ref["input_ids"]).long()
    want = torch.from_numpy(ref["logits"]).float()
    base = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(case_dir, "model"), torch_dtype=torch.float32,
                                                             attn_implementation="eager")
    model = PeftModel.from_pretrained(base, os.path.join(case_dir, "adapter")).eval()
    with torch.no_grad():
        got = model(input_ids=x).logits.float()
        merged = model.merge_and_unload()(input_ids=x).logits.float()
    scale = want.abs().max()
    return float((got - want).abs().max() / scale), float((merged - want).abs().max() / scale)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else ".gpu/peft"
    import peft
    import transformers
    print(f"peft_check: torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
    fails = 0
    for case in sorted(os.listdir(root)):
        try:
            adapted, merged = check(os.path.join(root, case))
            ok = adapted <= 1e-4 and merged <= 1e-4
            print(f"peft_check {case}: PeftModel logits max rel {adapted:.2e}, merge_and_unload {merged:.2e} -> "
                  f"{'ok' if ok else 'FAIL'}")
        except Exception as e:  # a load failure is the finding: report it and go on
            ok = False
            print(f"peft_check {case}: FAIL {type(e).__name__}: {str(e)[:300]}")
        fails += not ok
    return fails


if __name__ == "__main__":
    sys.exit(main())
