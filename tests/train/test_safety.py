"""Never lose a good checkpoint, never train on garbage silently (tiny Llama, a few steps each):
- a NaN run (--lr 1e6) stops with exit 4 and one error line naming the step; nothing non-finite is saved and
  --keep-last prunes no good checkpoint; --on-nonfinite skip leaves the states as they were (a checkpoint at a
  skipped step is byte-identical to the last good one) and stops after --max-skipped-steps in a row;
- a flipped byte in a rank's shard: --resume auto falls back to the newest checkpoint that verifies, saying so;
  --resume naming it refuses in one line naming the file; an edited trainer_state.json is refused alike;
- two runs on one --output: the second is refused naming the holder; a killed run's lock is taken over, saying so;
- a deleted `latest`: a plain run is refused, --resume auto continues from the newest complete checkpoint, and what
  killed saves left is removed with a line.

usage: test_safety.py ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import functools
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import unittest

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import PackedSample, train_command  # noqa: E402

TRAIN, PACK, MPIEXEC = sys.argv[1:4]
del sys.argv[1:4]
train_cmd = functools.partial(train_command, TRAIN, MPIEXEC)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "error:" in line]


def finite(step_dir):
    return all(np.isfinite(t).all() for f in step_dir.glob("*.safetensors") for t in load_file(f).values())


class Safety(PackedSample):
    PACK = PACK

    def test_a_nan_run_stops_with_exit_4_and_keeps_its_good_checkpoints(self):
        out = self.root / "nan"
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 12, "--save-every", 1, "--keep-last", 2, lr=1e6),
                        code=4)
        errors = error_lines(p.stderr)
        self.assertEqual(len(errors), 1, p.stderr[-2000:])
        self.assertRegex(errors[0], r"step \d+: the (loss|gradient norm) is .*nan.*nothing saved")
        bad_step = int(errors[0].split("step ")[1].split(":")[0])
        steps = sorted(d.name for d in (out / "checkpoints").glob("step-*"))
        self.assertEqual(steps, [f"step-{s:07d}" for s in (bad_step - 2, bad_step - 1)])   # the good ones kept
        self.assertEqual((out / "checkpoints/latest").read_text().strip(), steps[-1])
        for s in steps:
            self.assertTrue(finite(out / "checkpoints" / s), s)
        last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
        self.assertEqual((last["step"], last["nonfinite"]), (bad_step, True))

    def test_skip_leaves_the_states_as_they_were_and_stops_after_the_limit(self):
        out = self.root / "skip"
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 12, "--save-every", 1, "--keep-last", 0,
                                  "--on-nonfinite", "skip", "--max-skipped-steps", 2, lr=1e6), code=4)
        skipped = [line for line in p.stderr.splitlines() if "skipped, the weights" in line]
        self.assertEqual(len(skipped), 2, p.stderr[-2000:])
        first = int(skipped[0].split("step ")[1].split(":")[0])
        self.assertIn(f"step {first + 2}: ", error_lines(p.stderr)[0])
        good, skip = (out / "checkpoints" / f"step-{s:07d}" for s in (first - 1, first + 1))
        for f in ("model.safetensors", "optimizer.safetensors"):   # AdamW's step count included
            self.assertEqual((good / f).read_bytes(), (skip / f).read_bytes(), f)
        self.assertFalse((out / "checkpoints" / f"step-{first + 2:07d}").exists())

    def test_a_damaged_checkpoint_is_never_resumed(self):
        out = self.root / "flip"
        self.run_ok(train_cmd(2, self.data, out, "--sp", 2, "--steps", 4, "--save-every", 2))
        step4 = out / "checkpoints/step-0000004"
        shard = step4 / "model-00001-of-00002.safetensors"   # rank 1's file
        with open(shard, "r+b") as f:
            f.seek(-3, 2)
            f.write(b"\x01\x02\x03")
        p = self.run_ok(train_cmd(2, self.data, out, "--sp", 2, "--steps", 4, "--resume", step4), code=2)
        errors = error_lines(p.stderr)
        self.assertEqual(len(errors), 1, p.stderr[-2000:])
        self.assertIn(f"{shard}: xxh3", errors[0])
        p = self.run_ok(train_cmd(2, self.data, out, "--sp", 2, "--steps", 5, "--resume", "auto"))
        self.assertIn(f"{step4} does not verify", p.stderr)
        self.assertIn("resumed from", p.stderr)
        self.assertIn("step-0000002 at step 2", p.stderr)
        state = out / "checkpoints/step-0000002/trainer_state.json"
        state.write_text(state.read_text().replace('"cursor": ', '"cursor": 0, "was": '))
        p = self.run_ok(train_cmd(1, self.data, self.root / "other", "--resume", state.parent), code=2)
        self.assertIn("trainer_state.json", error_lines(p.stderr)[0])

    def test_one_run_per_output(self):
        out = self.root / "locked"
        first = subprocess.Popen(list(map(str, train_cmd(1, self.data, out, "--steps", 100000, "--save-every", -1))),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and not (out / "metrics.jsonl").exists():
                time.sleep(0.05)
            p = self.run_ok(train_cmd(1, self.data, out, "--steps", 2, "--overwrite"), code=2)
            errors = error_lines(p.stderr)
            self.assertEqual(len(errors), 1, p.stderr[-2000:])
            self.assertIn(f"{out} is in use by another run", errors[0])
            holder = int(errors[0].split(", pid ")[1].split(",")[0])   # the first run's rank (mpiexec's child)
            self.assertEqual(pathlib.Path(f"/proc/{holder}/comm").read_text().strip(), "ulysses-train")
        finally:
            os.killpg(first.pid, signal.SIGKILL)   # the rank too: killed, it cannot release its lock
            first.communicate()
        deadline = time.time() + 30
        while time.time() < deadline and pathlib.Path(f"/proc/{holder}").exists():   # until the kernel drops its lock
            time.sleep(0.05)
        self.assertTrue((out / "metrics.jsonl").exists())   # the second run removed nothing of the first's
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 2, "--overwrite"))
        self.assertIn(f"took over {out}/.lock from a run that ended without releasing it (host", p.stderr)
        self.assertEqual((out / ".lock").read_text(), "")   # a clean end leaves nobody named

    def test_checkpoints_without_latest_are_found_and_temporaries_removed(self):
        out = self.root / "nolatest"
        self.run_ok(train_cmd(1, self.data, out, "--steps", 4, "--save-every", 2))
        (out / "checkpoints/latest").unlink()
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 6), code=2)
        self.assertIn("already holds checkpoints", error_lines(p.stderr)[0])
        stray = [out / "checkpoints/.step-0000006.tmp-host-1", out / "checkpoints/latest.tmp-1"]
        stray[0].mkdir()
        stray[1].write_text("step-0000006\n")
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 6, "--resume", "auto"))
        self.assertIn("names no checkpoint, yet 2 complete one(s) are there", p.stderr)
        self.assertIn("step-0000004 at step 4", p.stderr)
        for s in stray:
            self.assertIn(f"removed {s}", p.stderr)
            self.assertFalse(s.exists())
        self.assertEqual((out / "checkpoints/latest").read_text().strip(), "step-0000006")


if __name__ == "__main__":
    unittest.main(verbosity=2)
