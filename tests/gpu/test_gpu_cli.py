"""ulysses-train on an NVIDIA GPU through its command line (exit 77 = skipped where there is none):
SP=4 with four ranks sharing the GPU through --comm mpi (host staging) equals SP=1 on the GPU, as pure Ulysses and as
Ulysses 2 × a ring of 2 (--sp-ring: the ring's pieces written out on the GPU in fp32), and in bf16 that ring (its
pieces by FlashAttention-2) and 2 head groups (backward from their kept output) as close to the fp32 losses as SP=1
in bf16; one rank
over NCCL equals one rank over MPI bit for bit; sharded states with every layer input offloaded train the same
with --prefetch (side streams) as without, at SP=4 through MPI, and as the plain path (every memory feature off:
the offloaded optimizer's page-locked copies, the gathers, TiledMLP and tiled logits on the GPU); a bf16 run logs
the varlen flash kernel, MFU and peak GPU memory.

usage: test_gpu_cli.py ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import json
import pathlib
import subprocess
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import TINY_CONFIG as CONFIG, PackedSample, losses  # noqa: E402

TRAIN, PACK, MPIEXEC = sys.argv[1:4]
del sys.argv[1:4]


def gpu_visible():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


class GpuTrain(PackedSample):
    PACK = PACK
    SEQ_LEN = 1024

    def train(self, n, name, *extra):
        out = self.root / name
        cmd = [MPIEXEC, "-n", n, TRAIN, "--data", self.data, "--model-config", CONFIG, "--output", out,
               "--threads", 1, "--lr", "3e-3", "--warmup", 2, "--steps", 6, "--micro-batch", 2, "--device", "cuda",
               *([] if "--precision" in extra else ["--precision", "fp32"]), *extra]   # auto would be bf16 here
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        return out, p.stderr

    def test_sp4_sharing_the_gpu_through_mpi_equals_sp1(self):
        sp1, _ = self.train(1, "sp1", "--sp", 1)
        sp4, log = self.train(4, "sp4", "--sp", 4, "--comm", "mpi")
        self.assertIn("collectives mpi (CUDA tensors staged through host memory)", log)
        ring, ring_log = self.train(4, "ring", "--sp", 4, "--sp-ring", 2, "--comm", "mpi")
        self.assertIn("Ulysses 2 inside each group × a ring of 2", ring_log)
        a = losses(sp1)
        for name, run in (("SP=4", sp4), ("SP=4 as Ulysses 2 x ring 2", ring)):
            b = losses(run)
            self.assertEqual((len(a), len(b)), (6, 6), "both runs log every step")
            for step, (x, y) in enumerate(zip(a, b), 1):
                self.assertLessEqual(abs(x - y), 1e-5 * abs(x), f"step {step}: SP=1 {x} vs {name} {y}")

    def test_bf16_ring_and_head_groups_are_as_close_to_fp32_as_sp1(self):
        # the ring's pieces (documents cut at chunk edges, grouped KV heads, causal and whole) by FlashAttention-2, and
        # 2 head groups with checkpointing (each group's backward from its kept output and log-sum-exp, by the same
        # kernel); each step's loss within twice SP=1 bf16's distance from the fp32 loss (or 5e-3 of it: bf16's own
        # rounding)
        truth, _ = self.train(1, "truth-fp32", "--sp", 1)
        sp1, _ = self.train(1, "sp1-bf16", "--sp", 1, "--precision", "bf16")
        ring, log = self.train(4, "ring-bf16", "--sp", 4, "--sp-ring", 2, "--comm", "mpi", "--precision", "bf16")
        self.assertIn("each piece by flash attention (FlashAttention-2", log)
        groups, _ = self.train(1, "groups-bf16", "--sp", 1, "--precision", "bf16", "--attention-head-groups", 2,
                               "--activation-checkpointing")
        t, a = losses(truth), losses(sp1)
        for name, run in (("ring", ring), ("2 head groups", groups)):
            b = losses(run)
            self.assertEqual((len(t), len(a), len(b)), (6, 6, 6), f"every run logs every step ({name})")
            for step, (x, y, z) in enumerate(zip(t, a, b), 1):
                self.assertLessEqual(abs(z - x), max(2 * abs(y - x), 5e-3 * abs(x)),
                                     f"step {step}: fp32 {x}, SP=1 bf16 {y}, {name} bf16 {z}")

    def test_nccl_equals_mpi_bit_for_bit_at_one_rank(self):
        nccl, log = self.train(1, "nccl", "--comm", "nccl")
        self.assertIn("collectives nccl", log)
        mpi, _ = self.train(1, "mpi", "--comm", "mpi")
        self.assertEqual(len(losses(nccl)), 6)
        self.assertEqual(losses(nccl), losses(mpi))

    def test_sharded_prefetch_on_the_gpu_equals_off_and_sp4_through_mpi(self):
        # sharded states (full_shard: the optimizer offloaded) and every layer input offloaded, with --prefetch
        # (auto: on for a GPU): the gathers and the copies back on side streams. Against the same run with it off,
        # and against SP=4 on four ranks sharing the GPU, whose gathers are staged through MPI on the side stream
        features = ["--offload-optimizer", "--offload-checkpoints", -1, "--tiled-mlp", "--tiled-logits"]
        on, log = self.train(1, "prefetch-on", "--comm", "nccl", *features)
        self.assertIn("prefetch: the next unit's all-gather is issued ahead", log)
        self.assertIn("copied on a side stream", log)
        off, _ = self.train(1, "prefetch-off", "--comm", "nccl", "--prefetch", "off", *features)
        sp4, _ = self.train(4, "prefetch-sp4", "--sp", 4, "--comm", "mpi", *features)
        plain, _ = self.train(1, "features-off", "--comm", "nccl")
        a, b, c, d = losses(on), losses(off), losses(sp4), losses(plain)
        self.assertEqual((len(a), len(b), len(c), len(d)), (6, 6, 6, 6), "every run logs every step")
        for step, (x, y, z, w) in enumerate(zip(a, b, c, d), 1):
            self.assertLessEqual(abs(x - y), 1e-6 * abs(y), f"step {step}: prefetch on {x} vs off {y}")
            self.assertLessEqual(abs(z - y), 1e-5 * abs(y), f"step {step}: SP=4 through MPI {z} vs SP=1 {y}")
            self.assertLessEqual(abs(w - y), 1e-5 * abs(w), f"step {step}: every feature off {w} vs on {y}")

    def test_bf16_logs_kernel_mfu_and_peak_memory(self):
        out, log = self.train(1, "bf16", "--precision", "bf16")
        self.assertIn("precision bf16", log)
        self.assertIn("attention: flash-attention varlen", log)
        m = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
        self.assertGreater(m["peak_gpu_mib"], 0)
        self.assertIn("peak GPU", log)
        if "MFU against" in log:   # a GPU of the peak table (or --peak-tflops) has an MFU
            self.assertGreater(m["mfu"], 0)


if __name__ == "__main__":
    if not gpu_visible():
        print("SKIPPED: no CUDA GPU visible to torch; the GPU end-to-end tests need an NVIDIA GPU")
        sys.exit(77)
    unittest.main(verbosity=2)
