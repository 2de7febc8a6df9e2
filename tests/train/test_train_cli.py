"""ulysses-train end to end through its command line under mpiexec, on the sample corpus and tiny model:
SP=4 tracks SP=1 for 20 steps, a SIGUSR1 mid-run saves and exits 3 and the resumed run reproduces the
uninterrupted losses exactly, one killed rank ends all ranks, bf16 (the model in bf16) and amp-bf16 (autocast)
at SP=2 track fp32 and log MFU (bad inputs: test_train_bad_input.py).

usage: test_train_cli.py ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import functools
import json
import math
import os
import pathlib
import re
import signal
import struct
import subprocess
import sys
import time
import unittest

import xxhash
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import (ROOT, SAMPLE, TINY_CONFIG as CONFIG, PackedSample, losses, small_tmpfs,  # noqa: E402
                        train_command)

TRAIN, PACK, MPIEXEC = sys.argv[1:4]
del sys.argv[1:4]


train_cmd = functools.partial(train_command, TRAIN, MPIEXEC)


def rank_pids(out):
    """The trainer processes of a run (argv[0] is the binary; mpiexec's own command line is not matched)."""
    p = subprocess.run(["pgrep", "-f", f"^{TRAIN} .*{out}"], capture_output=True, text=True)
    return [int(pid) for pid in p.stdout.split()]


def start(cmd, env=None):
    """A run in its own process group, so a failing test can end every rank it started."""
    return subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)


def stop(p, out):
    """Ends the launcher's group and any rank of this run left behind."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate()
    for pid in rank_pids(out):
        os.kill(pid, signal.SIGKILL)


def wait_for_metrics(out, lines=0):
    """Until out/metrics.jsonl exists and holds `lines` steps or more (300 s at most): the run is under way."""
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < lines):
        time.sleep(0.05)


def freeze_once_handled(p, *signals):
    """SIGSTOPs process p as soon as it has handlers for all of `signals` (its /proc status SigCgt mask): the moment
    the trainer has installed its stop handlers (SIGUSR1 and SIGTERM; MPI_Init may catch SIGUSR1 alone earlier),
    before anything slow of its start-up. False if that never happened (60 s)."""
    want = sum(1 << (sig - 1) for sig in signals)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        with open(f"/proc/{p.pid}/status") as f:
            caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", f.read()).group(1), 16)
        if caught & want == want:
            os.kill(p.pid, signal.SIGSTOP)
            return True
        time.sleep(0.001)
    return False


class Train(PackedSample):
    PACK = PACK

    def test_sp4_tracks_sp1_for_20_steps(self):
        sp1, sp4 = self.root / "sp1", self.root / "sp4"
        self.run_ok(train_cmd(1, self.data, sp1, "--sp", 1, "--steps", 20))
        self.run_ok(train_cmd(4, self.data, sp4, "--sp", 4, "--steps", 20))
        a, b = losses(sp1), losses(sp4)
        self.assertEqual(len(a), 20)
        for step, (x, y) in enumerate(zip(a, b), 1):
            self.assertLessEqual(abs(x - y), 1e-5 * max(1.0, abs(x)), f"step {step}: SP=1 {x} vs SP=4 {y}")
        self.assertLess(sum(a[-5:]) / 5, a[0] - 0.5, f"loss did not go down: {a}")
        self.assertTrue((sp4 / "checkpoints/latest").exists())

    def test_signal_saves_and_resume_is_exact(self):
        full, cut = self.root / "full", self.root / "cut"
        args = ("--sp", 2, "--steps", 30, "--micro-batch", 2)   # long enough for the signal to land mid-run
        self.run_ok(train_cmd(2, self.data, full, *args))
        p = start(train_cmd(2, self.data, cut, *args, "--save-every", 100))
        try:
            wait_for_metrics(cut, 3)
            ranks = rank_pids(cut)
            self.assertEqual(len(ranks), 2, ranks)
            os.kill(ranks[-1], signal.SIGUSR1)   # one rank signalled is enough: the ranks agree
            _, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 3, err[-3000:])
        finally:
            stop(p, cut)
        stopped_at = len(losses(cut))
        self.assertLess(stopped_at, 30)
        self.assertTrue((cut / "checkpoints" / f"step-{stopped_at:07d}").is_dir())
        self.run_ok(train_cmd(2, self.data, cut, *args, "--resume", "auto"))
        self.assertEqual(losses(cut), losses(full))   # bit for bit
        files = sorted(p.name for p in (full / "checkpoints/step-0000030").glob("*.safetensors"))
        self.assertEqual(len(files), 4, files)   # 2 ranks' sharded weights and AdamW state: the defaults' layout
        for f in files:   # and so are the final weights and AdamW state
            self.assertEqual((cut / "checkpoints/step-0000030" / f).read_bytes(),
                             (full / "checkpoints/step-0000030" / f).read_bytes(), f)

    def test_a_signal_during_start_up_stops_the_run(self):
        """SIGUSR1 while the trainer starts up (frozen the moment its handler is installed, signalled, then let go):
        exit 3 before the first step with nothing saved, not death by the signal (rc 138); the same in a dry run,
        which would otherwise swallow Slurm's one warning."""
        for extra, said in (((), "stop signal during start-up"), (("--dry-run",), "stop signal during the dry run")):
            out = self.root / f"early{len(extra)}"
            p = start([TRAIN, "--data", self.data, "--model-config", CONFIG, "--output", out, "--threads", 1,
                       "--steps", 5, *extra])
            try:
                self.assertTrue(freeze_once_handled(p, signal.SIGUSR1, signal.SIGTERM), "no stop handlers were installed")
                os.kill(p.pid, signal.SIGUSR1)
                os.kill(p.pid, signal.SIGCONT)
                _, err = p.communicate(timeout=300)
            finally:
                stop(p, out)
            self.assertEqual(p.returncode, 3, err[-3000:])
            self.assertIn(said, err)
            self.assertEqual(list(out.glob("checkpoints/step-*")), [])

    def test_the_run_stops_before_the_job_ends(self):
        """SLURM_JOB_END_TIME 20 s away and --stop-margin 15: the run saves and exits 3 once a step and a save would
        end within 15 s of it, long before its 100000 steps; a SLURM_JOB_END_TIME that is no time is one line."""
        out = self.root / "deadline"
        env = dict(os.environ, SLURM_JOB_END_TIME=str(int(time.time()) + 20))
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 100000, "--stop-margin", 15), code=3, env=env)
        self.assertIn("the job ends in", p.stderr)
        done = len(losses(out))
        self.assertIn(f"(--stop-margin 15): saved at step {done}, exiting with code 3", p.stderr)
        self.assertTrue((out / "checkpoints" / f"step-{done:07d}").is_dir())
        p = self.run_ok(train_cmd(1, self.data, self.root / "bad-end", "--steps", 1), code=2,
                        env=dict(os.environ, SLURM_JOB_END_TIME="soon"))
        self.assertIn("SLURM_JOB_END_TIME='soon' is not a time in seconds since the epoch", p.stderr)

    def test_sigterm_saves_and_exits_3(self):
        """What Slurm sends at the time limit (and scancel): the same save-and-stop as SIGUSR1, to one rank; and to
        the launcher, launch/local.sh, whose exit status is 3 too (mpiexec's own forwarding may read 0). A Ctrl-C
        (SIGINT to the terminal's whole group), and SIGINT to local.sh alone (once ignored: the ranks trained to the
        end, then it exited 130), save and stop the same way: exit 3."""
        local = [ROOT / "launch/local.sh", 2, *train_cmd(2, self.data, "-", "--sp", 2, "--steps", 100000)[4:]]
        env = dict(os.environ, ULYSSES_BIN=pathlib.Path(TRAIN).parents[2], MPIEXEC=MPIEXEC)
        plain = train_cmd(2, self.data, "-", "--sp", 2, "--steps", 100000)
        for name, cmd, send, code in (("term", plain, lambda p, ranks: os.kill(ranks[0], signal.SIGTERM), 3),
                                      ("term-local", local, lambda p, ranks: os.kill(p.pid, signal.SIGTERM), 3),
                                      ("ctrl-c", list(local), lambda p, ranks: os.killpg(p.pid, signal.SIGINT), 3),
                                      ("int-local", list(local), lambda p, ranks: os.kill(p.pid, signal.SIGINT), 3)):
            out = self.root / name
            cmd[cmd.index("--output") + 1] = out
            p = start(cmd, env=env)
            try:
                wait_for_metrics(out)
                ranks = rank_pids(out)
                self.assertEqual(len(ranks), 2, ranks)
                send(p, ranks)
                _, err = p.communicate(timeout=300)
                self.assertEqual(p.returncode, code, f"{name}: {err[-3000:]}")
                if code == 3:
                    step = len(losses(out))
                    self.assertEqual((out / "checkpoints/latest").read_text().strip(), f"step-{step:07d}")
            finally:
                stop(p, out)

    def test_killed_rank_ends_all_ranks(self):
        """Under mpiexec (launch/local.sh): what MPICH's launcher does when a rank dies. The trainer's own failure
        path is test_failure_on_one_rank_ends_all_ranks; srun's (the sbatch file's) is tests/slurm test 6."""
        out = self.root / "killed"
        p = start(train_cmd(4, self.data, out, "--sp", 4, "--steps", 100000))
        try:
            wait_for_metrics(out)
            ranks = rank_pids(out)
            self.assertEqual(len(ranks), 4, ranks)
            os.kill(ranks[1], signal.SIGKILL)
            killed_at = time.time()
            code = p.wait(timeout=60)
            self.assertNotEqual(code, 0)
            self.assertLess(time.time() - killed_at, 30)
            time.sleep(1)
            self.assertEqual(rank_pids(out), [])
        finally:
            stop(p, out)

    def test_failure_on_one_rank_ends_all_ranks(self):
        """The trainer's own failure path: rank 0 cannot write its checkpoint (the output filesystem is full)
        while the other ranks wait for it in a collective. Every rank must end, with an error, within 30 s,
        and no checkpoint may look complete. (A trainer that left its peers waiting would hang here.)"""
        with small_tmpfs(self, self.root / "full") as small:
            out = small / "run"
            p = start(train_cmd(4, self.data, out, "--sp", 2, "--steps", 100000, "--save-every", 2))
            try:
                _, err = p.communicate(timeout=300)
                self.assertNotEqual(p.returncode, 0, err[-3000:])
                failed_at = (out / "metrics.jsonl").stat().st_mtime   # the last step logged before the save
                self.assertLess(time.time() - failed_at, 30, "ranks lingered after the failure")
                self.assertIn("error:", err)
                self.assertIn("No space left on device", err)
                self.assertIn("the checkpoint of step 2 could not be saved", err)   # one line with a hint
                self.assertIn("HINT: free space", err)
                self.assertNotIn("Abort(", err)   # MPI_Abort's own text: the error line says it all
                self.assertEqual(len(losses(out)), 2)
                self.assertFalse((out / "checkpoints/latest").exists())
                self.assertEqual(list((out / "checkpoints").glob("step-*")), [])
                time.sleep(1)
                self.assertEqual(rank_pids(out), [])
            finally:
                stop(p, out)

    def test_a_save_that_hangs_ends_the_job(self):
        """One rank's fsync never returns (a stuck file system, hang_fsync.c) while the other waits for it inside the
        save: after --save-timeout every rank ends, with one line naming the save, and no checkpoint looks complete."""
        out = self.root / "stuck"
        env = dict(os.environ, LD_PRELOAD=os.environ["HANG_FSYNC_LIB"], HANG_FSYNC_RANK="1")
        p = subprocess.Popen(list(map(str, train_cmd(2, self.data, out, "--sp", 2, "--steps", 100000, "--save-every", 2,
                                                     "--save-timeout", 3))),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        try:
            _, err = p.communicate(timeout=300)
            self.assertNotEqual(p.returncode, 0, err[-3000:])
            fatal = [line for line in err.splitlines() if "fatal:" in line]
            self.assertEqual(len(fatal), 1, err[-3000:])
            self.assertIn("the checkpoint save of step 2 (every rank's writes, then a barrier) did not finish within 3 s",
                          fatal[0])
            self.assertIn("raise --save-timeout", fatal[0])
            self.assertLess(time.time() - (out / "metrics.jsonl").stat().st_mtime, 30, "ranks lingered after the timeout")
            self.assertEqual(len(losses(out)), 2)
            self.assertFalse((out / "checkpoints/latest").exists())
            time.sleep(1)
            self.assertEqual(rank_pids(out), [])
        finally:
            stop(p, out)

    def test_bf16_at_sp2_tracks_fp32_and_logs_mfu(self):
        fp32, bf16 = self.root / "fp32", self.root / "bf16"
        env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")   # bf16 where the kernel leaves AMX off
        self.run_ok(train_cmd(1, self.data, fp32, "--steps", 5, "--device", "cpu"), env=env)
        p = self.run_ok(train_cmd(2, self.data, bf16, "--sp", 2, "--steps", 5, "--precision", "bf16",
                                  "--peak-tflops", 2), env=env)
        amp = self.root / "amp-bf16"   # the autocast path beside the bf16 model
        self.run_ok(train_cmd(2, self.data, amp, "--sp", 2, "--steps", 5, "--precision", "amp-bf16"), env=env)
        for needle in ["device cpu; precision bf16; collectives mpi", "attention: fused SDPA per document",
                       "MFU against 2.0 TFLOPS per device (--peak-tflops)"]:
            self.assertIn(needle, p.stderr)
        a, b, c = losses(fp32), losses(bf16), losses(amp)
        self.assertEqual((len(b), len(c)), (5, 5))
        for step, (x, y, z) in enumerate(zip(a, b, c), 1):
            self.assertLessEqual(abs(x - y), 2e-2 * abs(x), f"step {step}: fp32 {x} vs bf16 {y}")
            self.assertLessEqual(abs(x - z), 2e-2 * abs(x), f"step {step}: fp32 {x} vs amp-bf16 {z}")
        self.assertNotEqual(a, b, "bf16 reproduced fp32 exactly: the model did not run in bf16")
        self.assertNotEqual(a, c, "amp-bf16 reproduced fp32 exactly: autocast did not take effect")
        self.assertNotEqual(b, c, "bf16 and amp-bf16 gave the same losses: one of them is not what it says")
        # the step line's FLOPS in a unit with three digits (a CPU's once printed "0.000 TFLOPS")
        rates = re.findall(r"\| ([0-9.]+) ([TGM])FLOPS/device", p.stderr)
        self.assertTrue(rates, p.stderr[-2000:])
        self.assertTrue(all(float(v) > 0 and len(v.replace(".", "").lstrip("0")) >= 2 for v, _ in rates), rates)
        m = json.loads((bf16 / "metrics.jsonl").read_text().splitlines()[-1])
        self.assertAlmostEqual(m["mfu"], m["tflops_per_device"] / 2, places=9)
        self.assertAlmostEqual(m["tflops_per_device"], m["tflops"] / 2, places=9)
        self.assertNotIn("peak_gpu_mib", m)

    def test_grad_accum_equals_a_larger_micro_batch(self):
        """--grad-accum 2 × --micro-batch 1 sees the sequences of --micro-batch 2 (same order, same global mean)."""
        big, accum = self.root / "micro2", self.root / "accum2"
        self.run_ok(train_cmd(1, self.data, big, "--steps", 4, "--micro-batch", 2))
        self.run_ok(train_cmd(1, self.data, accum, "--steps", 4, "--micro-batch", 1, "--grad-accum", 2))
        a, b = losses(big), losses(accum)
        self.assertEqual((len(a), len(b)), (4, 4))
        for step, (x, y) in enumerate(zip(a, b), 1):
            self.assertLessEqual(abs(x - y), 1e-5 * abs(x), f"step {step}: micro 2 {x} vs accum 2 {y}")
        tokens = [json.loads(l)["tokens"] for l in (accum / "metrics.jsonl").read_text().splitlines()]
        self.assertEqual(tokens, [json.loads(l)["tokens"] for l in (big / "metrics.jsonl").read_text().splitlines()])

    def test_keep_last_and_lr_decay(self):
        out = self.root / "keep"
        self.run_ok(train_cmd(1, self.data, out, "--steps", 5, "--save-every", 1, "--keep-last", 2,
                              "--lr-decay", "linear", "--min-lr-ratio", 0))   # train_cmd: --lr 3e-3 --warmup 2
        ckpts = out / "checkpoints"
        self.assertEqual(sorted(p.name for p in ckpts.glob("step-*")), ["step-0000004", "step-0000005"])
        self.assertEqual((ckpts / "latest").read_text().strip(), "step-0000005")
        lrs = [json.loads(l)["lr"] for l in (out / "metrics.jsonl").read_text().splitlines()]
        self.assertEqual(len(lrs), 5)
        # warmup to the peak at step 2; then transformers' linear decay, step s at its factor for s - 1 (peak at 3)
        for got, want in zip(lrs, [1.5e-3, 3e-3, 3e-3, 2e-3, 1e-3]):
            self.assertAlmostEqual(got, want, delta=1e-12)
        out = self.root / "constant"
        self.run_ok(train_cmd(1, self.data, out, "--steps", 4, "--lr-decay", "constant"))
        lrs = [json.loads(l)["lr"] for l in (out / "metrics.jsonl").read_text().splitlines()]
        self.assertEqual(lrs, [1.5e-3, 3e-3, 3e-3, 3e-3])

    def test_save_every_minus_one_saves_nothing(self):
        """--save-every -1 (benchmarks, calibration): no checkpoint at the end, nor on a stop signal, which still
        ends the run with exit 3; below -1 is one line naming the flag."""
        out = self.root / "nosave"
        p = self.run_ok(train_cmd(2, self.data, out, "--sp", 2, "--steps", 3, "--save-every", -1))
        self.assertIn("no checkpoints (--save-every -1)", p.stderr + p.stdout)
        self.assertEqual(len(losses(out)), 3)
        self.assertFalse((out / "checkpoints").exists())
        cut = self.root / "nosave-signalled"
        p = start(train_cmd(2, self.data, cut, "--sp", 2, "--steps", 100000, "--save-every", -1))
        try:
            wait_for_metrics(cut, 2)
            os.kill(rank_pids(cut)[0], signal.SIGUSR1)
            _, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 3, err[-3000:])
        finally:
            stop(p, cut)
        self.assertIn("stop signal received: not saved (--save-every -1)", err)
        self.assertFalse((cut / "checkpoints").exists())
        p = self.run_ok(train_cmd(1, self.data, self.root / "bad-save", "--save-every", -2), code=2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("--save-every", p.stderr)
        self.assertIn("-2", p.stderr)

    def test_flops_are_what_a_flop_counter_counts(self):
        """The FLOPs behind TFLOPS and MFU: the matmul part equals what torch's FlopCounterMode counts for one
        forward and backward of the transformers model (its attention bmm's aside: eager attention is dense
        over the row), scaled to the step's tokens; the attention part is 6·L·H·D·Σd² (causal, per document),
        Σd² over the documents of every sequence as h5py reads them from the shards. One step covers the whole
        dataset (micro-batch 5 × accumulation 57 = its 285 sequences), so the shuffle does not matter; at SP 1
        and SP 2 (each SP rank sees every sequence; counted once)."""
        import h5py
        import torch
        import transformers
        from torch.utils.flop_counter import FlopCounterMode
        manifest = json.loads((self.data / "manifest.json").read_text())
        S, sequences, pairs = manifest["seq_len"], 0, 0
        for shard in manifest["shards"]:
            with h5py.File(self.data / shard["file"], "r") as f:
                lengths, offsets, starts = f["seq_lengths"][:], f["doc_offsets"][:], f["doc_starts"][:]
            for q, length in enumerate(lengths):
                bounds = [int(b) for b in starts[offsets[q]:offsets[q + 1]]] + [int(length)]
                pairs += sum((b - a) ** 2 for a, b in zip(bounds, bounds[1:])) + (S - int(length)) ** 2
                sequences += 1
        self.assertEqual(sequences, 285)
        cfg = transformers.LlamaConfig(**json.loads(CONFIG.read_text()))
        cfg._attn_implementation = "eager"
        model = transformers.LlamaForCausalLM(cfg)
        ids = torch.randint(cfg.vocab_size, (1, S))
        with FlopCounterMode(display=False) as counter:
            model(ids, labels=ids).loss.backward()
        dense = counter.get_flop_counts()["Global"]
        matmuls = counter.get_total_flops() - dense.get(torch.ops.aten.bmm, 0)   # bmm: attention and RoPE angles
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        expected = matmuls * sequences + 6 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * pairs
        for sp in (1, 2):
            out = self.root / f"flops-sp{sp}"
            self.run_ok(train_cmd(sp, self.data, out, "--sp", sp, "--steps", 1, "--micro-batch", 5,
                                  "--grad-accum", 57))
            m = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
            ours = m["tflops"] * 1e12 * m["seconds"]
            self.assertLessEqual(abs(ours - expected), 1e-6 * expected,
                                 f"SP {sp}: ours {ours:.9g} vs expected {expected:.9g}")

    def test_output_with_checkpoints_needs_resume_or_overwrite(self):
        out = self.root / "reuse"
        self.run_ok(train_cmd(1, self.data, out, "--steps", 2))
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 2), code=2)
        self.assertIn("already holds checkpoints", p.stderr)
        self.assertIn("--resume auto", p.stderr)
        self.run_ok(train_cmd(1, self.data, out, "--steps", 1, "--overwrite"))   # starts over
        self.assertEqual(len(losses(out)), 1)
        self.assertEqual(sorted(p.name for p in (out / "checkpoints").glob("step-*")), ["step-0000001"])

    def test_activation_memory_features_track_the_plain_run(self):
        """At SP=2 for 20 steps: --activation-checkpointing reproduces the plain losses bit for bit (the same
        operations, recomputed), also with the inputs offloaded to host memory; with --tiled-mlp (48-token tiles) and --tiled-logits (100-token chunks) too —
        neither dividing the 128 tokens a rank holds — they track within 1e-5."""
        plain, ckpt, both = self.root / "plain-act", self.root / "ckpt-act", self.root / "both-act"
        self.run_ok(train_cmd(2, self.data, plain, "--sp", 2, "--steps", 20))
        p = self.run_ok(train_cmd(2, self.data, ckpt, "--sp", 2, "--steps", 20, "--activation-checkpointing"))
        self.assertIn("activations: checkpointed per decoder layer", p.stderr)
        p = self.run_ok(train_cmd(2, self.data, both, "--sp", 2, "--steps", 20, "--activation-checkpointing",
                                  "--mlp-tile-tokens", 48, "--logits-chunk-tokens", 100))
        self.assertIn("MLP in tiles of 48 tokens", p.stderr)
        self.assertIn("loss: tiled logits, 100 tokens per chunk", p.stderr)
        a = losses(plain)
        self.assertEqual(len(a), 20)
        self.assertEqual(losses(ckpt), a)
        offload = self.root / "offload-act"   # the inputs of both layers through host memory: still bit for bit
        p = self.run_ok(train_cmd(2, self.data, offload, "--sp", 2, "--steps", 20, "--offload-checkpoints", -1))
        # 2 layers × 128 tokens per rank × hidden 64 × 4 bytes (fp32 residual), micro-batch 1
        self.assertIn(f"checkpoint offload: {2 * 128 * 64 * 4} bytes of layer inputs", p.stderr)
        self.assertEqual(losses(offload), a)
        b = losses(both)
        self.assertEqual(len(b), 20)
        for step, (x, y) in enumerate(zip(a, b), 1):
            self.assertLessEqual(abs(x - y), 1e-5 * abs(x), f"step {step}: plain {x} vs all features {y}")

    def test_head_groups_track_all_heads_at_once(self):
        """20 steps with each layer's attention in 4 head groups (one query head each; the 2 KV heads each shared by
        two groups), every memory feature on and each group's first stage issued ahead (--prefetch on; on a CPU in
        line): the losses track all heads at once with the same features within 1e-5 (the groups' sums — o_proj's
        output, the input's gradient — run in another order)."""
        features = ["--steps", 20, "--activation-checkpointing", "--offload-checkpoints", -1, "--mlp-tile-tokens", 48,
                    "--logits-chunk-tokens", 100]
        whole, grouped = self.root / "all-heads", self.root / "four-groups"
        self.run_ok(train_cmd(1, self.data, whole, *features))
        p = self.run_ok(train_cmd(1, self.data, grouped, *features, "--attention-head-groups", 4, "--prefetch", "on"))
        self.assertIn("the next head group's projections and all-to-all are issued ahead", p.stderr)
        a, b = losses(whole), losses(grouped)
        self.assertEqual(len(a), 20)
        self.assertEqual(len(b), 20)
        self.assertNotEqual(a, b)   # the groups really ran: their sums differ in the last bits
        for step, (x, y) in enumerate(zip(a, b), 1):
            self.assertLessEqual(abs(x - y), 1e-5 * abs(x), f"step {step}: all heads {x} vs 4 groups {y}")

    def test_dry_run_prints_rank_map_and_memory(self):
        p = self.run_ok(train_cmd(4, self.data, self.root / "dry", "--sp", 2, "--dry-run"))
        for needle in ["rank    3:", "sp_rank 1 of sp group [2 3]", "dp_rank 1 of dp group [1 3]", "memory per rank",
                       "local rank 3, cpu, island"]:   # CPU ranks: no "gpu 3" in their map
            self.assertIn(needle, p.stderr)
        self.assertTrue(p.stderr.strip().endswith("dry run: nothing was written"), p.stderr[-300:])
        self.assertFalse((self.root / "dry" / "metrics.jsonl").exists())
        # data packed for SP 4 run at SP 2 (a forgotten or changed --sp): said in the plan lines
        self.assertIn("the data was packed for --sp 4 and this run has --sp 2 (each sequence split over 2 ranks; "
                      "DP 2): pass --sp 4", p.stderr)
        # head groups auto that resolve to all heads at once say so on the memory: line (it once said nothing)
        p = self.run_ok(train_cmd(1, self.data, self.root / "dry1", "--attention-head-groups", "auto", "--dry-run"))
        self.assertIn("attention head groups auto: 1 (all heads at once fit", p.stderr)

    def test_print_config_round_trips_through_config_file(self):
        cmd = train_cmd(1, self.data, self.root / "cfg", "--sp", 2, "--steps", 7, "--print-config")[3:]   # no mpiexec
        toml = self.run_ok(cmd).stdout
        self.assertIn("sp=2", toml.replace(" ", ""))
        path = self.root / "run.toml"
        path.write_text(toml)
        p = self.run_ok([MPIEXEC, "-n", 2, TRAIN, "--config", path, "--dry-run"])
        self.assertIn("sp_rank 1 of sp group [0 1]", p.stderr)
        p = self.run_ok([MPIEXEC, "-n", 2, TRAIN, "--config", path, "--sp", 1, "--dry-run"])   # flags override the file
        self.assertIn("dp_rank 1 of dp group [0 1]", p.stderr)

    def test_resume_from_the_checkpoint_alone(self):
        """--resume takes a run directory, its checkpoints/, its latest or a step directory, and the model from the
        checkpoint (no --model-config); a different --model-config is refused; --resume auto says what it found."""
        run = self.root / "first"
        self.run_ok(train_cmd(2, self.data, run, "--sp", 2, "--steps", 4, "--save-every", 2))
        ckpts = run / "checkpoints"
        for i, (form, step) in enumerate(((run, 4), (ckpts, 4), (ckpts / "latest", 4), (ckpts / "step-0000002", 2))):
            out = self.root / f"again-{i}"
            p = self.run_ok([MPIEXEC, "-n", 2, TRAIN, "--data", self.data, "--output", out, "--threads", 1, "--sp", 2,
                             "--steps", 5, "--lr", "3e-3", "--warmup", 2, "--resume", form])
            self.assertIn(f"resumed from {ckpts / f'step-{step:07d}'} at step {step}", p.stderr)
            self.assertEqual(len(losses(out)), 5 - step)
        other = self.root / "other.json"
        other.write_text(json.dumps(dict(json.loads(pathlib.Path(CONFIG).read_text()), num_hidden_layers=1)))
        p = self.run_ok([MPIEXEC, "-n", 2, TRAIN, "--data", self.data, "--output", self.root / "x", "--sp", 2,
                         "--model-config", other, "--resume", run], code=2)
        self.assertIn("differs from the config.json of the checkpoint", p.stderr)
        p = self.run_ok([MPIEXEC, "-n", 2, TRAIN, "--data", self.data, "--output", self.root / "x", "--sp", 2,
                         "--resume", self.root / "nowhere"], code=2)
        self.assertIn("is not a checkpoint", p.stderr)
        p = self.run_ok(train_cmd(1, self.data, self.root / "fresh", "--steps", 1, "--resume", "auto"))
        self.assertIn("--resume auto: no checkpoint under", p.stderr)
        p = self.run_ok(train_cmd(2, self.data, run, "--sp", 2, "--steps", 4, "--resume", "auto", "--dry-run"))
        self.assertIn(f"--resume auto: found {ckpts / 'step-0000004'}", p.stderr)

    def test_bf16_layouts_track_sp1_for_10_steps_with_every_memory_feature(self):
        """The bf16 model over 10 steps of two sequences each: SP=4 and SP=2 × DP=2 (hybrid shards), with every
        memory feature on, against SP=1 on one rank with none. Each layout rounds to bf16 at other points (the
        all-to-all regroups attention's sums, the shards reduce in another order, chunks and tiles split the sums), so
        the losses differ by bf16 rounding, and a loss averages those roundings over its tokens: within one bf16 unit
        (2^-8 = 3.9e-3) — 5e-3 relative. Observed: 7e-5."""
        env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")
        every = ("--offload-checkpoints", -1, "--tiled-mlp", "--mlp-tile-tokens", 8, "--logits-chunk-tokens", 8,
                 "--prefetch", "on", "--save-every", -1)
        ref, sp4, hybrid = self.root / "b-sp1", self.root / "b-sp4", self.root / "b-sp2dp2"
        common = ("--steps", 10, "--precision", "bf16")
        self.run_ok(train_cmd(1, self.data, ref, *common, "--grad-accum", 2, "--save-every", -1), env=env)
        self.run_ok(train_cmd(4, self.data, sp4, *common, "--sp", 4, "--grad-accum", 2, *every), env=env)
        self.run_ok(train_cmd(4, self.data, hybrid, *common, "--sp", 2, "--sharding", "hybrid_shard", *every),
                    env=env)
        want = losses(ref)
        self.assertEqual(len(want), 10)
        for name, got in (("SP=4", losses(sp4)), ("SP=2 x DP=2", losses(hybrid))):
            self.assertEqual(len(got), 10, name)
            worst = max(abs(x - y) / abs(x) for x, y in zip(want, got))
            print(f"bf16 {name} with every memory feature against SP=1: largest relative loss difference {worst:.2e}")
            self.assertLessEqual(worst, 5e-3, f"{name}: {got} vs SP=1 {want}")

    def test_resume_across_precisions(self):
        """The checkpoint holds the fp32 masters in every precision: an fp32 run resumed in bf16, and that run's
        checkpoint resumed in fp32 again, track the uninterrupted fp32 run (bf16 rounding: 2e-2)."""
        env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE_BF16")
        fp32, half, back = self.root / "p-fp32", self.root / "p-bf16", self.root / "p-back"
        self.run_ok(train_cmd(1, self.data, fp32, "--steps", 6, "--save-every", 2), env=env)
        p = self.run_ok(train_cmd(1, self.data, half, "--steps", 4, "--save-every", 2, "--precision", "bf16",
                                  "--resume", fp32 / "checkpoints" / "step-0000002"), env=env)
        self.assertIn("resumed from", p.stderr)
        self.assertIn('precision "fp32" → "bf16"', p.stderr)
        p = self.run_ok(train_cmd(1, self.data, back, "--steps", 6, "--resume", half / "checkpoints" / "latest"), env=env)
        self.assertIn('precision "bf16" → "fp32"', p.stderr)
        want, got = losses(fp32)[2:], losses(half) + losses(back)
        self.assertEqual(len(got), 4)
        for step, (x, y) in enumerate(zip(want, got), 3):
            self.assertLessEqual(abs(x - y), 2e-2 * abs(x), f"step {step}: fp32 {x} vs resumed across precisions {y}")
        self.assertNotEqual(want[:2], got[:2], "the bf16 steps reproduced fp32 exactly: bf16 did not take effect")

    def test_resume_lists_changes_and_data_order_changes_need_allow_changes(self):
        run = self.root / "changes"
        self.run_ok(train_cmd(1, self.data, run, "--steps", 2))
        latest = run / "checkpoints"
        p = self.run_ok(train_cmd(1, self.data, self.root / "c1", "--steps", 3, "--seed", 7, "--resume", latest), code=2)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for needle in ["the data each step sees would change: seed 1234 → 7", "--allow-changes"]:
            self.assertIn(needle, lines[0])
        p = self.run_ok(train_cmd(2, self.data, self.root / "c2", "--steps", 3, "--resume", latest), code=2)
        self.assertIn("sequences per step 1 → 2", p.stderr)
        p = self.run_ok(train_cmd(1, self.data, self.root / "c3", "--steps", 3, "--seed", 7, "--allow-changes",
                                  "--resume", latest))
        self.assertIn("resume changes (--allow-changes): seed 1234 → 7", p.stderr)
        cmd = train_cmd(1, self.data, self.root / "c4", "--steps", 4, "--resume", latest)
        cmd[cmd.index("--lr") + 1] = "1e-3"
        p = self.run_ok(cmd)   # the schedule may change: listed, not refused
        self.assertIn("resume changes: lr 0.003 → 0.001; steps 2 → 4", p.stderr)

    def valid_data(self):
        """The sample packed with a 10% validation split (once per class)."""
        data = self.root / "with-valid"
        if not data.exists():
            subprocess.run(list(map(str, [PACK, "pack", SAMPLE, "-o", data, "--seq-len", 256, "--sp", 4, "--pad-id",
                                          258, "--model-config", CONFIG, "--valid-fraction", 0.1])),
                           check=True, capture_output=True)
        return data

    def test_eval_loss_is_the_same_at_any_layout(self):
        """--eval-every on the validation split: eval loss at SP=1, SP=4 and SP=2 × DP=2 (5 sequences: one DP rank
        idle in the last round) equal ≤ 1e-6 relative (lr 0: the same seeded weights), in the log and metrics."""
        data = self.valid_data()
        got = {}
        for n, sp, k in ((1, 1, 0), (4, 4, 0), (1, 1, 5), (4, 2, 5)):
            out = self.root / f"eval-{n}-{sp}-{k}"
            cmd = train_cmd(n, data, out, "--sp", sp, "--steps", 2, "--eval-every", 2, "--eval-sequences", k)
            cmd[cmd.index("--lr") + 1] = "0"
            p = self.run_ok(cmd)
            self.assertIn("eval at step 2: loss", p.stderr)
            evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                     if "eval_loss" in line]
            self.assertEqual([e["step"] for e in evals], [2])
            self.assertAlmostEqual(evals[0]["eval_ppl"], math.exp(evals[0]["eval_loss"]), places=6)
            got[(n, sp, k)] = evals[0]
        for k, layouts in ((0, [(1, 1), (4, 4)]), (5, [(1, 1), (4, 2)])):
            a, b = (got[(n, sp, k)] for n, sp in layouts)
            self.assertEqual(a["eval_tokens"], b["eval_tokens"])
            self.assertLessEqual(abs(a["eval_loss"] - b["eval_loss"]), 1e-6 * abs(a["eval_loss"]), (k, a, b))
        self.assertLess(got[(1, 1, 5)]["eval_tokens"], got[(1, 1, 0)]["eval_tokens"])
        png = self.root / "metrics.png"   # tools/plot_metrics.py overlays runs, eval loss included
        plot = pathlib.Path(__file__).resolve().parents[2] / "tools" / "plot_metrics.py"
        self.run_ok([sys.executable, plot, self.root / "eval-1-1-0", self.root / "eval-4-4-0", "-o", png])
        self.assertEqual(png.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(png.stat().st_size, 10_000)
        p = self.run_ok(train_cmd(1, self.data, self.root / "no-valid", "--eval-every", 1, "--dry-run"), code=2)
        self.assertIn("the valid split holds no sequences — HINT: pack with --valid-fraction", p.stderr)

    def assert_events_equal_metrics(self, run):
        """run/tensorboard read by the tensorboard package's loader equals run/metrics.jsonl: every field of every
        line at its step under train/<field> or eval/<field>, once, as float32. Returns {tag: [(step, value)]}."""
        events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
        want = {}
        for line in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
            for key, value in line.items():
                if key != "step":
                    tag = "eval/" + key[5:] if key.startswith("eval_") else "train/" + key
                    want.setdefault(tag, []).append((line["step"], struct.unpack("f", struct.pack("f", value))[0]))
        self.assertEqual(sorted(events.Tags()["scalars"]), sorted(want))
        for tag, points in want.items():
            self.assertEqual([(e.step, e.value) for e in events.Scalars(tag)], points, tag)
        return want

    def test_tensorboard_scalars_equal_metrics(self):
        """The TensorBoard events, read by the tensorboard package's own loader (which checks every record's CRC),
        hold each number of metrics.jsonl at its step under train/<field> or eval/<field>, once — also after a
        resume from a checkpoint older than the last logged step (the resumed file's restart marker drops the
        steps the first run logged past it); --tensorboard none writes no events."""
        run = self.root / "tb"
        common = ("--sp", 2, "--eval-every", 4, "--eval-sequences", 2)
        self.run_ok(train_cmd(2, self.valid_data(), run, *common, "--steps", 8, "--save-every", 5))
        self.run_ok(train_cmd(2, self.valid_data(), run, *common, "--steps", 10,
                              "--resume", run / "checkpoints" / "step-0000005"))
        self.assertEqual(len(list((run / "tensorboard").glob("events.out.tfevents.*"))), 2)
        want = self.assert_events_equal_metrics(run)
        self.assertEqual([s for s, _ in want["train/loss"]], list(range(1, 11)))
        self.assertEqual([s for s, _ in want["eval/loss"]], [4, 8, 10])
        zero = self.root / "tb-lr0"   # a scalar of 0.0 is written too (the value is a oneof, not a proto3 default)
        cmd = train_cmd(1, self.data, zero, "--steps", 2)
        cmd[cmd.index("--lr") + 1] = "0"
        self.run_ok(cmd)
        self.assertEqual(self.assert_events_equal_metrics(zero)["train/lr"], [(1, 0.0), (2, 0.0)])
        off = self.root / "tb-off"
        self.run_ok(train_cmd(1, self.data, off, "--steps", 1, "--tensorboard", "none"))
        self.assertFalse((off / "tensorboard").exists())
        blocked = self.root / "tb-blocked"   # a folder that cannot be made: a warning, and the run goes on
        (self.root / "a-file").write_text("")
        p = self.run_ok(train_cmd(1, self.data, blocked, "--steps", 2, "--tensorboard", self.root / "a-file" / "tb"))
        self.assertIn("warning: TensorBoard events off for the rest of this run: cannot create the TensorBoard folder",
                      p.stderr)
        self.assertEqual(len(losses(blocked)), 2)

    def test_metrics_hold_every_step_once_after_a_resume(self):
        """A run killed after its last checkpoint wrote steps the resumed run writes again: they are dropped on
        resume, so metrics.jsonl holds each step once; the step line has an ETA."""
        run = self.root / "m"
        p = self.run_ok(train_cmd(1, self.data, run, "--steps", 8, "--save-every", 5))
        self.assertRegex(p.stderr, r"step +1/8 .*\| ETA \d+")
        self.run_ok(train_cmd(1, self.data, run, "--steps", 10, "--resume", run / "checkpoints" / "step-0000005"))
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        self.assertEqual(steps, list(range(1, 11)))
        fresh = self.root / "m-fresh"   # a run killed before its first checkpoint, started again: its lines go
        fresh.mkdir()
        (fresh / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 9.0}) + "\n" for s in (1, 2, 3)))
        self.run_ok(train_cmd(1, self.data, fresh, "--steps", 2, "--resume", "auto"))
        self.assertEqual([json.loads(line)["step"] for line in (fresh / "metrics.jsonl").read_text().splitlines()],
                         [1, 2])
        self.assertNotIn(9.0, losses(fresh))

    def test_a_damaged_trainer_state_is_one_line(self):
        """trainer_state.json with a step that is no integer or a cursor no integer holds (its size and checksum in
        the manifest made to match, as a crafted checkpoint would) is one error line at resume, naming the file and
        the field, exit 2: not a library exception (exit 1) from nlohmann."""
        run = self.root / "state"
        self.run_ok(train_cmd(2, self.data, run, "--sp", 2, "--steps", 1))
        step = run / "checkpoints" / "step-0000001"
        good = json.loads((step / "trainer_state.json").read_text())
        manifest = json.loads((step / "manifest.json").read_text())
        for field, value in (("step", "x"), ("cursor", 2.7e26)):
            text = json.dumps(dict(good, **{field: value}))
            (step / "trainer_state.json").write_text(text)
            for entry in manifest["files"]:
                if entry["file"] == "trainer_state.json":
                    entry.update(bytes=len(text), xxh3=xxhash.xxh3_64_hexdigest(text.encode()))
            (step / "manifest.json").write_text(json.dumps(manifest))
            p = self.run_ok(train_cmd(2, self.data, run, "--sp", 2, "--steps", 2, "--resume", "auto"), code=2)
            errors = [line for line in p.stderr.splitlines() if "error:" in line]
            self.assertEqual(len(errors), 1, p.stderr)
            self.assertIn(f'trainer_state.json: field "{field}" is', errors[0])
            self.assertIn("HINT: the checkpoint is damaged", errors[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
