"""slurm/train_1m.sbatch against a real Slurm started for this test (munged + slurmctld + two slurmd, all
under one temporary directory; slurm_cluster.py), on the tiny model and CPU ranks:

  1. `sbatch slurm/train_1m.sbatch` on 1 node × 4 tasks, SP 4: the job succeeds, the world is the 4 tasks
     Slurm asked for, the loss goes down, a checkpoint is written.
  2. two emulated nodes × 2 tasks, submitted through the file's bash submit mode: SP groups inside a node,
     DP across the nodes (rank map and run); SP 4 over the two nodes is refused (exit 2) with its hint.
  3. preemption: `scancel --signal=USR1` mid-run → the trainer saves and exits 3 → the job requeues itself →
     resumes → finishes; its losses equal test 1's uninterrupted run exactly.
  4. slurm/export.sbatch on test 1's run: ulysses-ckpt merge + export-hf give a Hugging Face directory.
  5. slurm/pack.sbatch as a job array of 2 with ids 1 and 3: each task packs its half of the inputs into its own
     dataset, numbered by its place in the array; a PARTS that disagrees with the array is refused.
  6. one rank of the production launch (srun from the sbatch file, SP 4 as Ulysses 2 × a ring of 2: SP_RING) killed
     with SIGKILL: every other rank ends and the job fails within 30 s — what a lost node or an OOM kill looks like
     from the job.
  7. jobs of one name wait for each other (--dependency=singleton); another job on the same OUTPUT is refused.
  8. a job whose time runs out without the signal: the trainer saves and exits 3 before the limit by itself;
     beside it, trainers not told the end: Slurm's --signal timer (USR1@45: a save, exit 3), and the limit's
     SIGTERM (a save, state TIMEOUT).
  9. a rank killed after a new checkpoint: the job is requeued and resumes, on the binaries of its first start.
 10. two consecutive requeues, each resuming from its save; MAX_REQUEUES=2 then ends the job at the third USR1.
 11. slurm/pipeline.sh: pack → train → export submitted at once, each job starting after the one before it.
 12. a USR1 during start-up (the dry run): every rank stops before its first step, exit 3, and the job is
     requeued; the restart skips the dry run and trains to the end.

The only changes to the sbatch file are documented environment variables and sbatch flags. A cluster that
cannot start fails the suite (no skip). The daemons are stopped by their PID files, also on failure.

usage: test_slurm.py ULYSSES_TRAIN ULYSSES_PACK REPO_ROOT ULYSSES_CKPT
"""
import gzip
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from slurm_cluster import SlurmCluster  # noqa: E402

TRAIN, PACK, ROOT = (pathlib.Path(a) for a in sys.argv[1:4])
CKPT = pathlib.Path(sys.argv[4])
del sys.argv[1:5]
BUILD = TRAIN.parents[2]   # <build>/src/train/ulysses-train
SBATCH = ROOT / "slurm/train_1m.sbatch"
CONFIG = ROOT / "datasets/sample/tiny-llama/config.json"
SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"
STEPS = 12

cluster = None   # set by main()
work = None


def losses(out):
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def job_env(out, **overrides):
    """The documented overrides that turn the 8B/1M job into a tiny CPU one."""
    env = dict(ULYSSES_ROOT=ROOT, ULYSSES_BIN=BUILD, DATA=work / "packed", MODEL_CONFIG=CONFIG, OUTPUT=out,
               STEPS=STEPS, LR="3e-3", WARMUP=2, SAVE_EVERY=0, THREADS=1, SBATCH_GPUS_PER_NODE=0,
               PRECISION="fp32", SEQ_LEN=256)
    env.update(overrides)
    return {k: str(v) for k, v in env.items()}


def log_of(info):
    return pathlib.Path(info["StdOut"]).read_text()


_baseline = {}


def baseline():
    """Test 1's job (1 node × 4 tasks, SP 4), run once: its info, log and output dir."""
    if not _baseline:
        out = work / "single"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=4", SBATCH], env=job_env(out, SP=4), cwd=work)
        info = cluster.wait(job)
        _baseline.update(info=info, log=log_of(info), out=out)
    return _baseline


class Sbatch(unittest.TestCase):
    def test_1_single_node_sp4(self):
        b = baseline()
        self.assertEqual(b["info"]["ExitCode"], "0:0", b["log"][-4000:])
        self.assertIn("world 4 ranks (SLURM_NTASKS 4) = sp 4 × dp 1 on 1 node", b["log"])
        self.assertRegex(b["log"], r"\[sbatch\] commit: \S+")
        self.assertIn("resolved ulysses-train configuration", b["log"])
        a = losses(b["out"])
        self.assertEqual(len(a), STEPS)
        self.assertLess(sum(a[-3:]) / 3, a[0] - 0.3, f"the loss did not go down: {a}")
        latest = (b["out"] / "checkpoints/latest").read_text().strip()
        self.assertTrue((b["out"] / "checkpoints" / latest).is_dir(), latest)

    def submit_mode(self, out, **env):
        """`bash slurm/train_1m.sbatch`: the file submits itself with NODES/GPUS_PER_NODE as sbatch flags."""
        p = subprocess.run(["bash", str(SBATCH)], env=dict(cluster.env, **job_env(out, REQUEST_GPUS=0, **env)),
                           cwd=work, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("+ sbatch --job-name=", p.stdout)
        return cluster.wait(int(re.search(r"Submitted batch job (\d+)", p.stdout).group(1)))

    def test_2_two_nodes_sp_inside_dp_across(self):
        out = work / "two-nodes"
        info = self.submit_mode(out, NODES=2, GPUS_PER_NODE=2, SP=2, STEPS=4)
        log = log_of(info)
        self.assertEqual(info["ExitCode"], "0:0", log[-4000:])
        self.assertNotIn("submitted with plain sbatch", log)   # its plan was checked before submitting
        self.assertIn("world 4 ranks (SLURM_NTASKS 4) = sp 2 × dp 2 on 2 nodes; 2 NVLink islands of 2 ranks; "
                      "SP groups inside islands", log)
        for rank, host, node, local, sp_group, dp_group in [(0, "n1", 0, 0, "[0 1]", "[0 2]"),
                                                            (1, "n1", 0, 1, "[0 1]", "[1 3]"),
                                                            (2, "n2", 1, 0, "[2 3]", "[0 2]"),
                                                            (3, "n2", 1, 1, "[2 3]", "[1 3]")]:
            self.assertIn(f"rank {rank:>4}: host {host}, node {node}, local rank {local}, cpu, island {node}, "
                          f"sp_rank {local} of sp group {sp_group}, dp_rank {node} of dp group {dp_group}", log)
        self.assertEqual(len(losses(out)), 4)
        self.assertTrue((out / "checkpoints/latest").exists())

        # SP groups across the nodes: the plan refuses before submitting, as the trainer would after the queue wait
        p = subprocess.run(["bash", str(SBATCH)], cwd=work, capture_output=True, text=True, timeout=60,
                           env=dict(cluster.env, **job_env(work / "crossing", REQUEST_GPUS=0, NODES=2, GPUS_PER_NODE=2,
                                                           SP=4, STEPS=4)))
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("--sp 4 spans NVLink islands of 2 ranks", p.stderr)
        self.assertIn("--allow-sp-across-islands", p.stderr)
        self.assertIn("nothing submitted", p.stdout)
        self.assertNotIn("Submitted batch job", p.stdout)
        # plain sbatch runs none of the file before the job: its plan is the job's first act (no lock, no binaries'
        # copy, no trainer), exit 2 and not requeued
        plain = work / "crossing-plain"
        info = cluster.wait(cluster.sbatch(["--nodes=2", "--ntasks-per-node=2", SBATCH], cwd=work,
                                           env=job_env(plain, NODES=2, GPUS_PER_NODE=2, SP=4, STEPS=4)))
        log = log_of(info)
        self.assertEqual(info["ExitCode"], "2:0", log[-3000:])
        for needle in ("submitted with plain sbatch: the memory plan is checked now", "--sp 4 spans NVLink islands",
                       "the memory plan does not fit (exit 2): nothing trained"):
            self.assertIn(needle, log)
        self.assertNotIn("resolved ulysses-train configuration", log)
        self.assertFalse((plain / "bin").exists())

    def test_3_preempted_job_requeues_and_matches(self):
        out = work / "preempted"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=4", SBATCH], env=job_env(out, SP=4), cwd=work)
        metrics = out / "metrics.jsonl"
        wait_until(self, lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, job)
        cluster.scancel("--signal=USR1", job)
        info = cluster.wait(job, hurry_requeued=True)
        log = log_of(info)
        self.assertEqual(info["ExitCode"], "0:0", log[-4000:])
        self.assertEqual(info["Restarts"], "1", log[-4000:])
        self.assertIn("ulysses-train exited with 3", log)
        self.assertIn(f"requeueing job {job}", log)
        stopped = re.search(r"saved at step (\d+)", log)
        self.assertTrue(stopped, log[-4000:])
        self.assertLess(int(stopped.group(1)), STEPS, "the signal came after the last step: nothing was preempted")
        self.assertIn(f"resumed from {out}/checkpoints/step-{int(stopped.group(1)):07d}", log)
        b = baseline()
        self.assertEqual(b["info"]["ExitCode"], "0:0")
        self.assertEqual(losses(out), losses(b["out"]))   # bit for bit

    def test_4_export_after_training(self):
        b = baseline()
        self.assertEqual(b["info"]["ExitCode"], "0:0")
        hf = work / "hf"
        job = cluster.sbatch(["--cpus-per-task=1", ROOT / "slurm/export.sbatch"], cwd=work,
                             env=dict(ULYSSES_ROOT=str(ROOT), ULYSSES_BIN=str(CKPT.parents[2]), RUN=str(b["out"]),
                                      HF_DIR=str(hf)))
        info = cluster.wait(job)
        log = log_of(info)
        self.assertEqual(info["ExitCode"], "0:0", log[-4000:])
        self.assertIn(f"merge {b['out']}/checkpoints/step-{STEPS:07d} -o", log)
        self.assertTrue((hf / "config.json").exists(), log[-4000:])
        self.assertTrue(list(hf.glob("*.safetensors")), log[-4000:])

    def test_5_pack_job_array(self):
        """The array's k-th task packs its share into part-00k whatever the task ids (here 1 and 3: a range that
        starts at 1 with a step of 2); a PARTS that differs from the array's size is refused by every task."""
        lines = gzip.open(SAMPLE, "rt").read().splitlines()
        inputs = []
        for i in range(4):   # four inputs: the first task packs 0 and 2, the second 1 and 3
            f = work / f"input-{i}.jsonl"
            f.write_text("\n".join(lines[i::4]) + "\n")
            inputs.append(str(f))
        (work / "inputs.txt").write_text("\n".join(inputs) + "\n")
        out = work / "parts"
        env = dict(ULYSSES_ROOT=str(ROOT), ULYSSES_BIN=str(BUILD), INPUT_LIST=str(work / "inputs.txt"),
                   OUTPUT=str(out), SEQ_LEN="256", SP="4", MODEL_CONFIG=str(CONFIG), VALID_FRACTION="0",
                   PACK_ARGS="--pad-id 258")
        job = cluster.sbatch(["--array=1-3:2", "--cpus-per-task=1", ROOT / "slurm/pack.sbatch"], cwd=work, env=env)
        wrong = cluster.sbatch(["--array=0-1", "--cpus-per-task=1", ROOT / "slurm/pack.sbatch"], cwd=work,
                               env=dict(env, OUTPUT=str(work / "wrong-parts"), PARTS="3"))
        for k, task_id in enumerate((1, 3)):
            info = cluster.wait(f"{job}_{task_id}")
            log = log_of(info)
            self.assertEqual(info["ExitCode"], "0:0", log[-4000:])
            self.assertIn(f"task {k}/2 on", log)
            self.assertIn(f"2 of 4 inputs -> {out}/part-00{k}", log)
            manifest = json.loads((out / f"part-00{k}/manifest.json").read_text())
            self.assertEqual(manifest["seq_len"], 256, manifest)
            self.assertEqual(sorted(i["path"] for i in manifest["inputs"]), sorted(inputs[k::2]))
        for task_id in (0, 1):
            info = cluster.wait(f"{wrong}_{task_id}")
            self.assertEqual(info["ExitCode"], "2:0")
            self.assertIn("error: PARTS=3 but the array has 2 tasks", log_of(info))
        self.assertFalse((work / "wrong-parts").exists())


class OneJobPerOutput(unittest.TestCase):
    def test_7_same_name_waits_same_output_is_refused(self):
        """Jobs of one name run one after another (--dependency=singleton: the second stays PENDING with
        Reason=Dependency while the first runs); a job of another name whose OUTPUT the running one holds (the
        lock in OUTPUT) stops at once with one line, exit 2, and leaves the running job alone."""
        out = work / "owned"
        first = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", "--job-name=same", SBATCH],
                               env=job_env(out, SP=2, STEPS=100000, DRY_RUN_FIRST=0), cwd=work)
        wait_until(self, (out / "metrics.jsonl").exists, first)
        second = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", "--job-name=same", SBATCH],
                                env=job_env(work / "second", SP=2, STEPS=2, DRY_RUN_FIRST=0), cwd=work)
        other = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", "--job-name=other", SBATCH],
                               env=job_env(out, SP=2, STEPS=2, DRY_RUN_FIRST=0), cwd=work)
        try:
            info = cluster.wait(other, timeout=120)
            log = log_of(info)
            self.assertEqual(info["ExitCode"], "2:0", log[-3000:])
            self.assertIn(f"error: OUTPUT={out} is in use by job {first}", log)
            waiting = cluster.job(second)
            self.assertEqual((waiting["JobState"], waiting["Reason"]), ("PENDING", "Dependency"), waiting)
            self.assertEqual(cluster.job(first)["JobState"], "RUNNING")
        finally:
            cluster.scancel(first)
        info = cluster.wait(second, timeout=180)   # runs once the first has ended
        self.assertEqual(info["ExitCode"], "0:0", log_of(info)[-3000:])

    def test_8_the_trainer_stops_before_the_time_limit(self):
        """A 1-minute job with STOP_MARGIN=45 and no signal in time (SIGNAL_LEAD=5): the sbatch hands the job's end
        (squeue's, on this Slurm 22.05) to the trainer, which saves and exits 3 about 15 s in; MAX_REQUEUES=0 then
        ends the job there instead of requeueing it. Beside it, told a far end (--end-time) so that they do not stop
        by themselves: a job whose USR1 comes from Slurm's timer (--signal=USR1@45) saves and exits 3 before the
        limit; and the TIMEOUT branch, a job whose USR1 goes to the batch shell alone (--signal=B:USR1@5), runs into
        the limit: Slurm's SIGTERM makes the trainer save within KillWait, and the job ends TIMEOUT, not requeued."""
        out = work / "limit"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", "--time=1", "--signal=USR1@5", SBATCH],
                             env=job_env(out, SP=2, STEPS=100000, DRY_RUN_FIRST=0, STOP_MARGIN=45, MAX_REQUEUES=0),
                             cwd=work)
        far_end = "--end-time 4102444800"   # the trainer's own stop never comes first
        late_out = work / "timeout"
        late = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", "--time=1", "--signal=B:USR1@5", SBATCH],
                              env=job_env(late_out, SP=2, STEPS=100000, DRY_RUN_FIRST=0, EXTRA_ARGS=far_end), cwd=work)
        timer_out = work / "signal-timer"
        timer = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", "--time=1", "--signal=USR1@45", SBATCH],
                               env=job_env(timer_out, SP=2, STEPS=100000, DRY_RUN_FIRST=0, EXTRA_ARGS=far_end,
                                           MAX_REQUEUES=0), cwd=work)
        self.check_timeout_branch(late, late_out)
        self.check_signal_timer(timer, timer_out)
        info = cluster.wait(job, timeout=180)
        log = log_of(info)
        self.assertEqual(info["ExitCode"], "3:0", log[-3000:])
        self.assertIn("the job ends in", log)
        done = len(losses(out))
        self.assertIn(f"(--stop-margin 45): saved at step {done}, exiting with code 3", log)
        self.assertIn("not requeueing after 0 requeues (MAX_REQUEUES)", log)
        self.assertTrue((out / "checkpoints" / f"step-{done:07d}").is_dir())

    def check_signal_timer(self, job, out):
        """The --signal=USR1@45 timer path: Slurm's own USR1 (no scancel), a save, exit 3 before the limit."""
        info = cluster.wait(job, timeout=240)
        log = log_of(info)
        self.assertEqual((info["JobState"], info["ExitCode"]), ("FAILED", "3:0"), log[-3000:])
        done = len(losses(out))
        self.assertIn(f"stop signal received: saved at step {done}, exiting with code 3", log)
        self.assertIn("stopped to be resumed; not requeueing after 0 requeues (MAX_REQUEUES)", log)
        self.assertNotIn("SIGTERM", log)

    def check_timeout_branch(self, job, out):
        info = cluster.wait(job, timeout=240)
        log = log_of(info)
        self.assertEqual((info["JobState"], info["Restarts"]), ("TIMEOUT", "0"), log[-3000:])
        self.assertIn("[sbatch] SIGTERM (time limit or scancel)", log)
        done = len(losses(out))
        self.assertIn(f"stop signal received: saved at step {done}, exiting with code 3", log)
        self.assertIn("after SIGTERM; not requeueing", log)
        self.assertEqual((out / "checkpoints/latest").read_text().strip(), f"step-{done:07d}")


def wait_until(test, done, job, timeout=180):
    """Polls done() until it holds; after `timeout` s a failure that shows the job."""
    deadline = time.time() + timeout
    while time.time() < deadline and not done():
        time.sleep(0.05)
    test.assertTrue(done(), cluster.job(job))


def wait_for_log(test, job, text, timeout=240):
    """Polls job's log until it holds `text`, making a requeued job eligible 3 s after its requeue (as
    cluster.wait(hurry_requeued=True)); returns the log."""
    deadline, hurried = time.time() + timeout, set()
    while time.time() < deadline:
        info = cluster.job(job)
        log = log_of(info) if pathlib.Path(info.get("StdOut", "")).exists() else ""
        if text in log:
            return log
        if info.get("JobState") in ("PENDING",) and info.get("Reason") == "BeginTime" and info["Restarts"] not in hurried:
            cluster.scontrol("update", f"JobId={job}", "StartTime=now+3")
            hurried.add(info["Restarts"])
        test.assertNotIn(info.get("JobState"), ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), log[-3000:])
        time.sleep(0.2)
    test.fail(f"{text!r} not in job {job}'s log after {timeout} s")


class Requeues(unittest.TestCase):
    def test_9_a_failure_after_a_new_checkpoint_is_requeued(self):
        """A rank killed after the run saved a checkpoint newer than its start's: the job is requeued (once) and
        resumes from it; the binaries of the first start are the ones the restart runs."""
        out = work / "crash-after-save"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", SBATCH],
                             env=job_env(out, SP=2, STEPS=100000, SAVE_EVERY=2, DRY_RUN_FIRST=0), cwd=work)
        wait_until(self, (out / "checkpoints/step-0000002").is_dir, job)
        ranks = subprocess.run(["pgrep", "-f", f"^{out}/bin/job-{job}/ulysses-train "], capture_output=True,
                               text=True).stdout.split()
        self.assertEqual(len(ranks), 2, ranks)
        os.kill(int(ranks[1]), signal.SIGKILL)
        try:
            log = wait_for_log(self, job, f"resumed from {out}/checkpoints/step-")
        finally:
            cluster.scancel(job)
        self.assertRegex(log, r"failed with exit \d+ after saving step-\d+ \(this start resumed from none\): requeueing "
                              rf"job {job}, requeue 1 of at most 20")
        snapshot = out / f"bin/job-{job}"
        self.assertEqual(log.count(f"binaries copied to {snapshot}"), 1, log[-3000:])
        self.assertEqual(log.count(f"[sbatch] binary: {snapshot}/ulysses-train"), 2, log[-3000:])
        cluster.wait(job)

    def test_10_max_requeues_counts_this_scripts_requeues(self):
        """MAX_REQUEUES=2: two consecutive USR1s requeue the job twice, each restart resuming from the save before
        it; the third (in the second restart) stops it, exit 3."""
        out = work / "requeued-twice"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", SBATCH],
                             env=job_env(out, SP=2, STEPS=100000, DRY_RUN_FIRST=0, MAX_REQUEUES=2), cwd=work)
        wait_until(self, (out / "metrics.jsonl").exists, job)
        for requeue in (1, 2):
            cluster.scancel("--signal=USR1", job)
            wait_for_log(self, job, f"requeue {requeue} of at most 2")
            log = wait_for_log(self, job, f"restart {requeue},")
            saved = re.findall(r"saved at step (\d+)", log)[-1]
            wait_for_log(self, job, f"resumed from {out}/checkpoints/step-{int(saved):07d}")   # training again
        cluster.scancel("--signal=USR1", job)
        info = cluster.wait(job, timeout=180)
        log = log_of(info)
        self.assertEqual((info["ExitCode"], info["Restarts"]), ("3:0", "2"), log[-3000:])
        self.assertIn("stopped to be resumed; not requeueing after 2 requeues (MAX_REQUEUES)", log)


class Pipeline(unittest.TestCase):
    def test_11_pack_train_export_chain(self):
        """slurm/pipeline.sh submits the three jobs at once; each starts after the one before it ended OK, and the
        export holds the trained run's last checkpoint as a Hugging Face model."""
        (work / "pipe-inputs.txt").write_text(f"{SAMPLE}\n")
        packed, run, hf = work / "pipe-packed", work / "pipe-run", work / "pipe-hf"
        env = dict(cluster.env, **job_env(run, REQUEST_GPUS=0, NODES=1, GPUS_PER_NODE=2, SP=2, STEPS=4),
                   PACKED=str(packed), RUN=str(run), HF_DIR=str(hf), INPUT_LIST=str(work / "pipe-inputs.txt"),
                   VALID_FRACTION="0", PACK_ARGS="--pad-id 258", PACK_CPUS="1", EXPORT_CPUS="1", JOB_NAME="pipe")
        del env["DATA"], env["OUTPUT"]   # the pipeline sets them per stage
        p = subprocess.run(["bash", str(ROOT / "slurm/pipeline.sh")], env=env, cwd=work, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        ids = re.search(r"\[pipeline\] pack (\d+) → train (\d+) → export (\d+)", p.stdout)
        self.assertTrue(ids, p.stdout + p.stderr)
        self.assertIn(f"--dependency=afterok:{ids.group(1)},singleton", p.stderr)
        self.assertIn(f"--dependency=afterok:{ids.group(2)}", p.stderr)
        pack, train, export = (cluster.wait(i, timeout=300) for i in ids.groups())
        for info in (pack, train, export):
            self.assertEqual(info["ExitCode"], "0:0", log_of(info)[-3000:])
        self.assertGreaterEqual(train["StartTime"], pack["EndTime"])   # ISO times: as strings, in order
        self.assertGreaterEqual(export["StartTime"], train["EndTime"])
        self.assertEqual(len(losses(run)), 4)
        self.assertIn(f"merge {run}/checkpoints/step-0000004 -o", log_of(export))
        self.assertTrue((hf / "config.json").exists())
        self.assertTrue(list(hf.glob("*.safetensors")))


def signal_mask(pid, field):
    """A signal mask of process pid's /proc status (SigCgt: caught, SigPnd/ShdPnd: pending), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(rf"{field}:\s*([0-9a-f]+)", f.read()).group(1), 16)
    except (FileNotFoundError, ProcessLookupError):
        return 0


def has(mask, *signals):
    want = sum(1 << (sig - 1) for sig in signals)
    return mask & want == want


class StartUp(unittest.TestCase):
    def test_12_a_signal_during_start_up_requeues(self):
        """The dry run's ranks are frozen (SIGSTOP) as soon as they exist, then let run 2 ms at a time until their
        stop handlers exist (a tiny model's dry run ends a fraction of a second later: polling alone can miss it);
        Slurm's USR1 waits for them (scancel --signal=USR1), they go on, stop before any step and exit 3; the job is
        requeued and its restart (no dry run) trains to the end."""
        out = work / "start-up-signal"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=2", SBATCH], env=job_env(out, SP=2, STEPS=4), cwd=work)
        pattern = f"^{out}/bin/job-{job}/ulysses-train .*--dry-run"
        ranks = []

        def dry_run_started():
            found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
            for pid in found:
                if pid not in ranks:
                    os.kill(int(pid), signal.SIGSTOP)
                    ranks.append(pid)
            return len(ranks) == 2

        wait_until(self, dry_run_started, job)
        deadline = time.time() + 120
        while not all(has(signal_mask(p, "SigCgt"), signal.SIGUSR1, signal.SIGTERM) for p in ranks):
            self.assertLess(time.time(), deadline, "the stop handlers never appeared")
            for pid in ranks:
                if not has(signal_mask(pid, "SigCgt"), signal.SIGUSR1, signal.SIGTERM):
                    os.kill(int(pid), signal.SIGCONT)
                    time.sleep(0.002)
                    os.kill(int(pid), signal.SIGSTOP)
        cluster.scancel("--signal=USR1", job)
        wait_until(self, lambda: all(has(signal_mask(p, "SigPnd") | signal_mask(p, "ShdPnd"), signal.SIGUSR1)
                                     for p in ranks), job, timeout=60)   # Slurm's USR1 reached both frozen ranks
        for pid in ranks:
            os.kill(int(pid), signal.SIGCONT)
        info = cluster.wait(job, timeout=240, hurry_requeued=True)
        log = log_of(info)
        self.assertEqual((info["ExitCode"], info["Restarts"]), ("0:0", "1"), log[-3000:])
        self.assertIn("stop signal during the dry run: exiting with code 3", log)
        self.assertIn("[sbatch] a stop signal during the dry run", log)
        self.assertIn(f"requeueing job {job}, requeue 1", log)
        self.assertEqual(len(losses(out)), 4)


class SrunFailure(unittest.TestCase):
    def test_6_killed_rank_ends_the_job(self):
        out = work / "killed"
        job = cluster.sbatch(["--nodes=1", "--ntasks-per-node=4", SBATCH],
                             env=job_env(out, SP=4, SP_RING=2, STEPS=100000, DRY_RUN_FIRST=0), cwd=work)
        wait_until(self, (out / "metrics.jsonl").exists, job)
        ranks = subprocess.run(["pgrep", "-f", f"^{out}/bin/job-{job}/ulysses-train "], capture_output=True,
                               text=True).stdout.split()
        self.assertEqual(len(ranks), 4, ranks)
        os.kill(int(ranks[2]), signal.SIGKILL)
        killed_at = time.time()
        info = cluster.wait(job, timeout=120)
        self.assertLess(time.time() - killed_at, 30, "the other ranks outlived the killed one")
        self.assertIn("sp 4 (ulysses 2 × ring 2)", log_of(info))   # killed mid-ring: the ranks block in its exchanges
        self.assertNotEqual(info["ExitCode"], "0:0", log_of(info)[-4000:])
        self.assertEqual(info["Restarts"], "0", "a crash is not a preemption: no requeue")
        time.sleep(1)
        left = subprocess.run(["pgrep", "-f", f"^{out}/bin/job-{job}/ulysses-train "], capture_output=True, text=True).stdout.split()
        self.assertEqual(left, [])


def main():
    global cluster, work
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="uly-slurm-test-"))
    work = tmp / "work"
    work.mkdir()
    # meson's timeout sends SIGTERM: turn it into an exception so the daemons are still stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    ok = False
    try:
        t0 = time.time()
        subprocess.run([str(PACK), "pack", str(SAMPLE), "-o", str(work / "packed"), "--seq-len", "256", "--sp", "4",
                        "--pad-id", "258", "--model-config", str(CONFIG)], check=True, capture_output=True)
        with SlurmCluster(base=tmp / "slurm", cpus_per_node=4) as c:
            cluster = c
            print(f"slurm cluster up in {time.time() - t0:.1f} s under {c.base}", flush=True)
            result = unittest.main(exit=False, verbosity=2).result
            ok = result.wasSuccessful()
            if not ok:
                print(c.logs(), file=sys.stderr)
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept for inspection: {tmp}", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
