"""A real model: Hugging Face GPT-2 (GPT2LMHeadModel, random weights from a
small config, eager attention) on the CPU, one process, no collectives; one
forward+backward.

    gpt2.py OUTDIR MODE      (MODE: rec | light | cdm | ops, as for golden.py)

writes OUTDIR/gpt2/rank0.zst, OUTDIR/gpt2/exp-rank0/region1/ or
OUTDIR/gpt2/ops-rank0.json.  Adapted from shared/golden-torch2.11/tools/gpt2.py
(12 layers of 768 on a GPU there): 2 layers of 64 here, so that a 2-core CI
runs it in seconds.  Exit status 3 where transformers is missing.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))

import torch  # noqa: E402

try:
    from transformers import GPT2Config, GPT2LMHeadModel
except Exception as e:
    print("gpt2 needs transformers: left out (%s)" % e)
    sys.exit(3)

from commdebug import Recorder  # noqa: E402

outdir, MODE = sys.argv[1], sys.argv[2]
cdir = os.path.join(outdir, "gpt2")
os.makedirs(cdir, exist_ok=True)
torch.manual_seed(0)
cfg = GPT2Config(n_layer=int(os.environ.get("LAYERS", "2")), n_embd=64, n_head=4,
                 n_positions=64, vocab_size=512, attn_implementation="eager")
model = GPT2LMHeadModel(cfg)
ids = torch.randint(0, cfg.vocab_size, (2, 16))


def step():
    model(ids, labels=ids).loss.backward()


if MODE == "cdm":
    from torch.distributed.tensor.debug import CommDebugMode
    cdm = CommDebugMode()
    with cdm:
        step()
    d = os.path.join(cdir, "exp-rank0", "region1")
    os.makedirs(d, exist_ok=True)
    for n in range(4):
        with open(f"{d}/table{n}.txt", "w") as f:
            f.write(cdm.generate_comm_debug_tracing_table(noise_level=n))
        cdm.log_comm_debug_tracing_table_to_file(file_name=f"{d}/log{n}.txt", noise_level=n)
        cdm.generate_json_dump(file_name=f"{d}/dump{n}.json", noise_level=n)
    with open(f"{d}/counts.json", "w") as f:
        json.dump({"total": cdm.get_total_counts(), "counts": {}}, f)
    sharding = {k: str(v) for k, v in cdm.get_sharding_info().items()}
    params = {k: sorted(v) for k, v in cdm.get_parameter_info().items()}
    with open(f"{d}/sharding.json", "w") as f:
        json.dump({"sharding": sharding, "parameters": params}, f, indent=1)
elif MODE in ("rec", "light"):
    rec = Recorder(os.path.join(cdir, "rank0.zst" if MODE == "rec" else "light-rank0.zst"),
                   light=MODE == "light")
    with rec(label="gpt2 step 1"):
        step()
    rec.close()
elif MODE == "ops":
    from oplog import OpLog
    log = OpLog()
    with log:
        step()
    with open(os.path.join(cdir, "ops-rank0.json"), "w") as f:
        json.dump([log.ops], f)
else:
    raise SystemExit("unknown mode " + MODE)
print("[rank 0] gpt2/%s: done" % MODE, flush=True)
