"""One side of tools/bench/memory_bench.py in its own process: transformers' LlamaForCausalLM on one
document of S tokens, 2 AdamW steps (fp32, CPU), with gradient checkpointing (side A), plus ALST's own
TiledMLP and TiledFusedLogitsLoss from the deepspeed package (side B). Prints one JSON line: this process's
peak RSS (VmHWM) and the step times.

usage: memory_bench_worker.py CONFIG.json SEQ_LEN A|B LOSS_CHUNK_TOKENS THREADS
"""
import json
import sys
import time

import torch
import transformers

cfg_path, S, side, loss_chunk, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
transformers.logging.set_verbosity_error()
cfg = transformers.LlamaConfig(**json.load(open(cfg_path)))
cfg._attn_implementation = "sdpa"

if side == "B":   # ALST's memory stack (alst_stack.py)
    from alst_stack import patch_tiled_mlp, tiled_loss_sum

    patch_tiled_mlp()

torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg)
model.gradient_checkpointing_enable()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
ids = torch.randint(cfg.vocab_size, (1, S))
labels = torch.cat([ids[:, 1:], torch.full((1, 1), -100)], dim=1)   # shifted once, as our loader does


def loss_of(ids):
    if side == "A":
        logits = model(input_ids=ids).logits
        return torch.nn.functional.cross_entropy(logits.float().view(-1, cfg.vocab_size), labels.view(-1),
                                                 reduction="sum")
    hidden = model.model(input_ids=ids).last_hidden_state
    return tiled_loss_sum(model, hidden, labels, loss_chunk)


times = []
for _ in range(2):
    t0 = time.perf_counter()
    loss_of(ids).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))   # kB
print(json.dumps({"peak_rss_mib": hwm / 1024, "step_seconds": times}))
