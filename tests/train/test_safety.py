"""Never lose a good checkpoint, never train on garbage silently (tiny Llama, a few steps each):
- a NaN run (--lr 1e6) stops with exit 4 and one error line naming the step; nothing non-finite is saved and
  --keep-last prunes no good checkpoint; --on-nonfinite skip leaves the states as they were (a checkpoint at a
  skipped step is byte-identical to the last good one) and stops after --max-skipped-steps in a row;
- a flipped byte in a rank's shard: --resume auto falls back to the newest checkpoint that verifies, saying so;
  --resume naming it refuses in one line naming the file; an edited trainer_state.json is refused alike;
- two runs on one --output: the second is refused naming the holder; a killed run's lock is taken over, saying so;
- a deleted `latest`: a plain run is refused, --resume auto continues from the newest complete checkpoint, and what
  killed saves left is removed with a line;
- a shard truncated between two steps (the trainer's ULYSSES_TEST_PAUSE_AFTER_STEP hook) and an id past the
  vocabulary are one line naming the shard, the sequence and the number, exit 2, the steps made saved first;
- the data's identity on resume is its manifest's content: a copy elsewhere resumes, other data behind the same path
  is refused;
- metrics.jsonl on a full disk is a warning and the run goes on; an --output whose checkpoints/ is a file is refused
  before the first step.

usage: test_safety.py ULYSSES_TRAIN ULYSSES_PACK MPIEXEC
"""
import functools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import unittest

import h5py
import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: the shared CLI checks
from cli_checks import SAMPLE, TINY_CONFIG, PackedSample, small_tmpfs, train_command  # noqa: E402

TRAIN, PACK, MPIEXEC = sys.argv[1:4]
del sys.argv[1:4]
train_cmd = functools.partial(train_command, TRAIN, MPIEXEC)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "error:" in line]


def wait_for(path, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline and not path.exists():
        time.sleep(0.02)
    return path.exists()


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


    def copy_of_data(self, name):
        copy = self.root / name
        shutil.copytree(self.data, copy)
        return copy

    def test_a_shard_truncated_mid_run_stops_after_a_save(self):
        data, out = self.copy_of_data("cut"), self.root / "cut-run"
        shard = data / "shard-00000.h5"
        whole = shard.read_bytes()
        p = subprocess.Popen(list(map(str, train_cmd(2, data, out, "--sp", 2, "--steps", 6))), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             env=dict(os.environ, ULYSSES_TEST_PAUSE_AFTER_STEP="2"))
        try:
            self.assertTrue(wait_for(out / "paused-after-step-2"), "the run never paused after step 2")
            with open(shard, "r+b") as f:
                f.truncate(len(whole) // 2)
            (out / "paused-after-step-2").unlink()
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        self.assertEqual(p.returncode, 2, err[-2000:])
        errors = error_lines(err)
        self.assertEqual(len(errors), 1, err[-2000:])
        self.assertRegex(errors[0], rf"{shard}: {len(whole) // 2} bytes while sequence \d+ was read, {len(whole)} when "
                                    "it was opened: the shard was truncated")
        self.assertEqual((out / "checkpoints/latest").read_text().strip(), "step-0000002")   # the steps made, saved
        shard.write_bytes(whole)
        p = self.run_ok(train_cmd(2, data, out, "--sp", 2, "--steps", 3, "--resume", "auto"))
        self.assertIn("at step 2", p.stderr)

    def test_an_id_past_the_vocabulary_names_shard_sequence_and_id(self):
        data, out = self.copy_of_data("oov"), self.root / "oov-run"
        shard = data / "shard-00000.h5"
        with h5py.File(shard, "r+") as f:
            f["input_ids"][:, 5] = 5000   # every sequence: whichever the first step reads
        manifest = json.loads((data / "manifest.json").read_text())
        manifest["shards"][0]["bytes"] = shard.stat().st_size
        (data / "manifest.json").write_text(json.dumps(manifest))
        p = self.run_ok(train_cmd(1, data, out, "--steps", 2), code=2)
        errors = error_lines(p.stderr)
        self.assertEqual(len(errors), 1, p.stderr[-2000:])
        self.assertRegex(errors[0], rf"{shard}: sequence \d+, token 5: id 5000 is outside the model's vocabulary of 320")
        self.assertEqual(list((out / "checkpoints").glob("step-*")), [])   # no step was made: nothing to save

    def test_the_data_on_resume_is_its_content_not_its_path(self):
        out = self.root / "ident"
        self.run_ok(train_cmd(1, self.data, out, "--steps", 2))
        copy = self.copy_of_data("moved")
        p = self.run_ok(train_cmd(1, copy, out, "--steps", 3, "--resume", "auto"))
        self.assertIn(f"the data moved, \"{self.data}\" → \"{copy}\": the same sequences", p.stderr)
        shutil.rmtree(copy)   # other sequences behind the same path: the corpus packed in another order
        subprocess.run(list(map(str, [PACK, "pack", SAMPLE, "-o", copy, "--seq-len", self.SEQ_LEN, "--sp", 4,
                                      "--pad-id", 258, "--model-config", TINY_CONFIG, "--seed", 7])),
                       check=True, capture_output=True)
        p = self.run_ok(train_cmd(1, copy, out, "--steps", 4, "--resume", "auto"), code=2)
        self.assertIn(f"data \"{copy}\": not the data the checkpoint's run read", error_lines(p.stderr)[0])

    def test_metrics_on_a_full_disk_warn_and_the_run_goes_on(self):
        with small_tmpfs(self, self.root / "full", size="8k") as small:   # a page for .lock, one for ~13 lines
            out = small / "run"
            p = self.run_ok(train_cmd(1, self.data, out, "--steps", 30, "--save-every", -1, "--tensorboard", "none"))
            warnings = [line for line in p.stderr.splitlines() if "lines off for the rest of this run" in line]
            self.assertEqual(len(warnings), 1, p.stderr[-2000:])
            self.assertIn(f"{out}/metrics.jsonl", warnings[0])
            self.assertIn("No space left on device", warnings[0])
            self.assertIn("done: 30 steps", p.stderr)

    def test_an_output_whose_checkpoints_is_a_file_is_refused_before_the_first_step(self):
        out = self.root / "odd-output"
        out.mkdir()
        (out / "checkpoints").write_text("not a folder\n")
        p = self.run_ok(train_cmd(1, self.data, out, "--steps", 2), code=2)
        self.assertIn(f"{out}/checkpoints is there and is not a directory", error_lines(p.stderr)[0])
        self.assertFalse((out / "metrics.jsonl").exists())


if __name__ == "__main__":
    unittest.main(verbosity=2)
