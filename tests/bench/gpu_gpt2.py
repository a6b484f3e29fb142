#!/usr/bin/env python3
"""What recording costs on a GPU: the 124M GPT-2 (Hugging Face, 12 layers,
768 wide, built from its config, random weights) as a one-rank NCCL
DistributedDataParallel job, forward + backward + AdamW, bf16 autocast,
one region per step: plain vs light vs full recorder vs a do-nothing
dispatch mode vs CommDebugMode, ratios from one run (the rounds, variants
and summary of tests/bench/recorder.py; each step ends with
torch.cuda.synchronize()).  Never pass/fail.

    python3 tests/bench/gpu_gpt2.py [--rounds R] [--steps K] [--batch B] [--seq T]
                                    [--device cuda|cpu]

--device cpu (gloo, a 2-layer 128-wide model) is a dry run of the script on
a machine without a GPU; its numbers mean nothing for a GPU.
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import recorder as bench  # noqa: E402  (tests/bench/recorder.py)

SHOWN = ["plain", "light", "full", "nothing", "cdm"]


def gpt2_step(dev, batch, seq):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    if dev.type == "cuda":
        cfg = GPT2Config(n_positions=max(seq, 1024))
    else:
        cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=seq, vocab_size=1024)
    model = torch.nn.parallel.DistributedDataParallel(GPT2LMHeadModel(cfg).to(dev))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        sync()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    import torch
    import torch.distributed as dist
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", store=dist.HashStore(),
                            rank=0, world_size=1,
                            **({"device_id": dev} if dev.type == "cuda" else {}))
    step = gpt2_step(dev, a.batch, a.seq)
    tmp = tempfile.mkdtemp(prefix="commdebug-gpubench-")
    runs, recs = bench.make_variants(step, tmp, 0)
    runs = {k: v for k, v in runs.items() if k in SHOWN}
    t0 = time.perf_counter()
    res = bench.rounds(runs, a.rounds, a.steps)
    took = time.perf_counter() - t0
    for r in recs:
        r.close()
    dist.destroy_process_group()
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "CPU"
    print("gpu_gpt2: %s, torch %s, GPT-2 %s, batch %d x %d, bf16 autocast, one-rank %s DDP, "
          "AdamW; %d rounds of %d steps per variant (%.0f s)"
          % (name, torch.__version__, "124M" if dev.type == "cuda" else "2x128", a.batch,
             a.seq, "NCCL" if dev.type == "cuda" else "gloo", a.rounds, a.steps, took))
    print("%-26s %9s %9s %22s %22s" % ("", "wall ms", "CPU ms", "wall ratio (IQR)",
                                       "CPU ratio (IQR)"))
    for v, (w, c, wr, wq, cr, cq) in bench.summary(res).items():
        print("%-26s %9.2f %9.2f %8.3f (%.3f-%.3f) %8.3f (%.3f-%.3f)"
              % (bench.LABELS[v], w, c, wr, wq[0], wq[1], cr, cq[0], cq[1]))


if __name__ == "__main__":
    main()
