#!/usr/bin/env python3
"""The multi-rank GPU checks CI cannot run: one line PASS / FAIL / SKIP per check, for the first user with two
or more GPUs on one node. Everything below is tested on CPU ranks in CI (this script's --cpu mode runs the same
comparisons over MPI); what only several GPUs show is NCCL between distinct devices, its lazy connect, the
watchdog with a real hung peer, and the refusal of two ranks on one GPU.

checks (N = --gpus ranks, 2 or 4, the tiny Llama of datasets/sample, fp32, 8 steps, sequences of 1024 tokens):
  sp_n_tracks_sp1        SP=N over NCCL (MPI with --cpu) tracks SP=1 (losses ≤ 1e-5 relative)
  nccl_equals_mpi        SP=N over NCCL equals SP=N over MPI with host staging (≤ 1e-6)
  send_recv_equals_a2a   ULYSSES_NCCL_SEND_RECV=1 (NCCL < 2.28's path) tracks ncclAlltoAll (≤ 1e-6)
  full_shard_tracks      --sharding full_shard over N ranks tracks the replicated SP=1 run (≤ 1e-5)
  hung_peer_ends_job     one rank stopped (SIGSTOP) after step 2: the watchdog ends the job within
                         --comm-timeout + 60 s, with its "did not finish within" line
  shared_gpu_refused     two ranks on one GPU over NCCL: exit 2 with one line naming both, before NCCL's init

examples:
  python3 tools/check_multi_gpu.py --gpus 2                 # on a node with two GPUs, after tools/build.sh
  python3 tools/check_multi_gpu.py --gpus 2 --cpu           # the same comparisons on CPU ranks over MPI

Exit code: 0 when no check failed (SKIPs allowed), 1 when one failed, 2 on bad input.
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = REPO / "datasets/sample/licenses.jsonl.gz"
CONFIG = REPO / "datasets/sample/tiny-llama/config.json"
STEPS = 8


def nccl_version():
    """The NCCL of the torch wheel, the one the trainer loads (its RUNPATH), as a tuple; None when this Python has no
    CUDA torch (then the trainer's start-up line is the record)."""
    try:
        import torch
        return tuple(torch.cuda.nccl.version())
    except Exception:   # no torch, a CPU build, or no NCCL in it
        return None


def losses(out):
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def worst_relative(a, b):
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))


class Checks:
    def __init__(self, a, work):
        self.a, self.work, self.failed = a, work, False
        self.device = "cpu" if a.cpu else "cuda"
        self.data = work / "packed"
        subprocess.run(list(map(str, [a.pack, "pack", SAMPLE, "-o", self.data, "--seq-len", 1024, "--sp", a.gpus,
                                      "--pad-id", 258, "--model-config", CONFIG])), check=True, capture_output=True)

    def train(self, name, ranks, *extra, env=None, comm=None):
        out = self.work / name
        cmd = [self.a.mpiexec, "-n", ranks, self.a.train, "--data", self.data, "--model-config", CONFIG,
               "--output", out, "--steps", STEPS, "--device", self.device, "--precision", "fp32", "--seed", 7,
               "--comm", comm or ("mpi" if self.a.cpu else "nccl"), *extra]
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=self.a.timeout,
                           env={**os.environ, **(env or {})})
        if p.returncode != 0:
            raise RuntimeError(f"{name}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
        return out

    def report(self, name, ok, detail):
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        self.failed |= not ok

    def skip(self, name, why):
        print(f"SKIP {name}: {why}", flush=True)

    def run(self, name, fn):
        try:
            fn()
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            self.report(name, False, str(e))

    def compare(self, name, a, b, tol):
        worst = worst_relative(losses(a), losses(b))
        self.report(name, worst <= tol, f"worst relative loss difference {worst:.3g} over {STEPS} steps "
                                        f"(limit {tol:g})")

    def sp1(self):
        if not hasattr(self, "_sp1"):
            self._sp1 = self.train("sp1", 1, "--sp", 1)
        return self._sp1

    def sp_n_tracks_sp1(self):
        self.compare("sp_n_tracks_sp1", self.train("spN", self.a.gpus, "--sp", self.a.gpus,
                                                      "--sharding", "no_shard"), self.sp1(), 1e-5)

    def nccl_equals_mpi(self):
        if self.a.cpu:
            return self.skip("nccl_equals_mpi", "--cpu: MPI on both sides")
        nccl = self.work / "spN"
        if not nccl.exists():
            nccl = self.train("spN", self.a.gpus, "--sp", self.a.gpus, "--sharding", "no_shard")
        mpi = self.train("spN-mpi", self.a.gpus, "--sp", self.a.gpus, "--sharding", "no_shard", comm="mpi")
        self.compare("nccl_equals_mpi", nccl, mpi, 1e-6)

    def send_recv_equals_a2a(self):
        if self.a.cpu:
            return self.skip("send_recv_equals_a2a", "--cpu: no NCCL")
        version = nccl_version()
        if version is not None and version < (2, 28):   # no ncclAlltoAll: both runs would take send/recv
            return self.skip("send_recv_equals_a2a", f"NCCL {'.'.join(map(str, version))} has no ncclAlltoAll "
                             "(< 2.28): there is only the send/recv path to run")
        a2a = self.train("a2a", self.a.gpus, "--sp", self.a.gpus, "--sharding", "no_shard")
        sr = self.train("send-recv", self.a.gpus, "--sp", self.a.gpus, "--sharding", "no_shard",
                        env={"ULYSSES_NCCL_SEND_RECV": "1"})
        self.compare("send_recv_equals_a2a", sr, a2a, 1e-6)   # the same data; attention backward may not be
                                                              # deterministic run to run

    def full_shard_tracks(self):
        self.compare("full_shard_tracks", self.train("full-shard", self.a.gpus, "--sp", self.a.gpus,
                                                     "--sharding", "full_shard"), self.sp1(), 1e-5)

    def hung_peer_ends_job(self):
        if self.a.cpu:
            return self.skip("hung_peer_ends_job", "--cpu: MPI collectives are not watched")
        out, limit = self.work / "hung", 20
        cmd = [self.a.mpiexec, "-n", self.a.gpus, self.a.train, "--data", self.data, "--model-config", CONFIG,
               "--output", out, "--steps", 1000, "--device", "cuda", "--comm", "nccl", "--sp", self.a.gpus,
               "--comm-timeout", limit, "--save-every", 0]
        p = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        metrics = out / "metrics.jsonl"
        until = time.monotonic() + self.a.timeout
        while time.monotonic() < until and p.poll() is None and \
                (not metrics.exists() or len(metrics.read_text().splitlines()) < 2):
            time.sleep(0.5)
        pattern = f"ulysses-train.*--output {out}"   # the ranks, not mpiexec (whose command line names it too)
        pids = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True).stdout.split()
        ranks = [int(x) for x in pids if int(x) != p.pid]

        def end_all():
            p.kill()
            for pid in ranks:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass

        if p.poll() is not None or not ranks:
            end_all()
            return self.report("hung_peer_ends_job", False, "the run ended before a rank could be stopped")
        os.kill(max(ranks), signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            _, err = p.communicate(timeout=limit + 60)
        except subprocess.TimeoutExpired:
            end_all()
            return self.report("hung_peer_ends_job", False, f"still running {limit + 60} s after a rank was stopped")
        left = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True).stdout.split()
        end_all()   # the stopped rank, should the launcher have left it
        self.report("hung_peer_ends_job", "did not finish within" in err and not left,
                    f"ended {time.monotonic() - stopped:.0f} s after the stop (timeout {limit} s), exit {p.returncode}"
                    f"{', ranks left running: ' + ' '.join(left) if left else ''}")

    def shared_gpu_refused(self):
        if self.a.cpu:
            return self.skip("shared_gpu_refused", "--cpu: no GPU to share")
        out = self.work / "shared"
        cmd = [self.a.mpiexec, "-n", 2, self.a.train, "--data", self.data, "--model-config", CONFIG,
               "--output", out, "--steps", 1, "--device", "cuda", "--comm", "nccl", "--sp", 2]
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=self.a.timeout,
                           env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
        self.report("shared_gpu_refused", p.returncode == 2 and "NCCL refuses two ranks on one GPU" in p.stderr,
                    f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:] }")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=2, help="ranks = GPUs on this node to use: 2 or 4 (default 2)")
    ap.add_argument("--cpu", action="store_true", help="CPU ranks over MPI: the comparisons without a GPU")
    ap.add_argument("--train", default=str(REPO / "build/src/train/ulysses-train"))
    ap.add_argument("--pack", default=str(REPO / "build/src/pack/ulysses-pack"))
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run (default 300)")
    a = ap.parse_args()
    if a.gpus not in (2, 4):
        print(f"error: --gpus {a.gpus}: the checks run SP over all ranks and the tiny Llama has 4 heads "
              "— HINT: pass --gpus 2 or 4 (a node with more GPUs uses the first ones)", file=sys.stderr)
        return 2
    for flag, path in (("--train", a.train), ("--pack", a.pack)):
        if not os.access(path, os.X_OK):
            print(f"error: {flag} {path} is not an executable — HINT: run tools/build.sh first", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        c = Checks(a, pathlib.Path(tmp))
        for name in ("sp_n_tracks_sp1", "nccl_equals_mpi", "send_recv_equals_a2a", "full_shard_tracks",
                     "hung_peer_ends_job", "shared_gpu_refused"):
            c.run(name, getattr(c, name))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
