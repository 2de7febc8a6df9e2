"""A throwaway Slurm cluster on this machine: munged + slurmctld + two slurmd (nodes n1, n2 on 127.0.0.1).

Everything lives under one temporary base directory (config, munge key and socket, state, spools, logs,
pid files) and listens on free ports picked at start, so several copies (two developers' test runs on one
machine) do not collide. `stop()` ends the daemons by the PIDs in their pid files (never by name) and is
safe to call after a partial start. What mattered on Debian 12 / Slurm 22.05 is in ../shared/PLATFORM.md
of the project's notes: config_overrides (more CPUs than the machine has), proctrack/linuxproc,
task/none, MpiDefault=pmi2, OverSubscribe=YES, AuthInfo=socket=… pointing at our munged.

    with SlurmCluster(cpus_per_node=4) as c:
        job = c.sbatch(["script.sbatch"], env={...}, cwd=tmp)
        info = c.wait(job)            # polls `scontrol show job` until the job is done
        assert info["ExitCode"] == "0:0"
"""
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DONE_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
               "DEADLINE", "PREEMPTED"}

NEVER_RUNS = {"PartitionConfig", "BadConstraints", "PartitionNodeLimit", "PartitionTimeLimit"}


class SlurmError(RuntimeError):
    pass


def _free_port_block(n):
    """n consecutive TCP ports on 127.0.0.1 that nothing listens on now (random base: two runs rarely race)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        try:
            socks = []
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SlurmError(f"no block of {n} free ports found")


class SlurmCluster:
    def __init__(self, nodes=("n1", "n2"), cpus_per_node=4, base=None):
        self.nodes = list(nodes)
        self.cpus = cpus_per_node
        self.base = pathlib.Path(base or tempfile.mkdtemp(prefix="uly-slurm-"))
        self.conf = self.base / "slurm.conf"
        self.munge_socket = self.base / "munge" / "munge.socket"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        for k in list(self.env):   # a test run inside a Slurm job must not leak that job's identity into ours
            if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF":
                del self.env[k]
        self.pid_files = []

    # ---- start / stop ------------------------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=60):
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo"):
            if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
                raise SlurmError(f"{tool} not found — install slurm-wlm slurmctld slurmd slurm-client munge "
                                 "(tools/bootstrap.sh does)")
        self._start_munge()
        self._write_conf()
        self._daemon(["slurmctld", "-c", "-f", self.conf], self.base / "slurmctld.pid")
        for n in self.nodes:
            self._daemon(["slurmd", "-N", n, "-f", self.conf], self.base / f"slurmd-{n}.pid")
        self._wait_idle(timeout)

    def stop(self):
        """Ends every daemon we started, by the PID in its pid file: TERM, then KILL after 10 s."""
        pids = []
        for f in self.pid_files:
            try:
                pids.append(int(pathlib.Path(f).read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        for pid in pids:
            while time.time() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.pid_files = []

    def _sbin(self, tool):
        return shutil.which(tool) or f"/usr/sbin/{tool}"

    def _start_munge(self):
        d = self.munge_socket.parent
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        key = self.base / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        pid = self.base / "munged.pid"
        self._run([self._sbin("munged"), f"--socket={self.munge_socket}", f"--key-file={key}",
                   f"--pid-file={pid}", f"--log-file={self.base / 'munged.log'}",
                   f"--seed-file={self.base / 'munged.seed'}", "--force"], "munged")
        self.pid_files.append(pid)
        self._wait_for(lambda: pid.exists() and self.munge_socket.exists(), 20, "munged to create its socket",
                       self.base / "munged.log")

    def _write_conf(self):
        ctld_port = _free_port_block(1)
        node_port = _free_port_block(len(self.nodes))
        for sub in ["state", "log"] + [f"spool/{n}" for n in self.nodes]:
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        names = f"n[1-{len(self.nodes)}]" if self.nodes == [f"n{i + 1}" for i in range(len(self.nodes))] \
            else ",".join(self.nodes)
        b = self.base
        self.conf.write_text(f"""\
# Written by tests/slurm/slurm_cluster.py for one test run; everything under {b}
ClusterName=uly{os.getpid()}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd-%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
SchedulerType=sched/backfill
NodeName={names} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 Port=[{node_port}-{node_port + len(self.nodes) - 1}] CPUs={self.cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")

    def _daemon(self, cmd, pid_file):
        self._run([self._sbin(cmd[0])] + [str(c) for c in cmd[1:]], cmd[0])
        self.pid_files.append(pid_file)

    def _run(self, cmd, what):
        p = subprocess.run([str(c) for c in cmd], env=self.env, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SlurmError(f"{what} failed to start (exit {p.returncode}): {p.stderr.strip()}\n"
                             f"{self.logs()}")

    def _wait_for(self, cond, timeout, what, log=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        tail = log.read_text()[-2000:] if log and log.exists() else self.logs()
        raise SlurmError(f"timed out after {timeout} s waiting for {what}\n{tail}")

    def _wait_idle(self, timeout):
        def idle():
            p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True)
            states = dict(line.split() for line in p.stdout.splitlines() if line.strip())
            return p.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes)
        self._wait_for(idle, timeout, f"nodes {self.nodes} to be idle")

    def logs(self, chars=3000):
        out = []
        for f in sorted((self.base / "log").glob("*.log")) + [self.base / "munged.log"]:
            if f.exists():
                out.append(f"--- {f.name} ---\n{f.read_text()[-chars:]}")
        return "\n".join(out)

    # ---- jobs --------------------------------------------------------------------------------
    def sbatch(self, args, env=None, cwd=None):
        e = dict(self.env, **(env or {}))
        p = subprocess.run(["sbatch", "--parsable"] + [str(a) for a in args], env=e, cwd=cwd,
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SlurmError(f"sbatch {' '.join(map(str, args))} failed: {p.stderr.strip()}")
        return int(p.stdout.strip().split(";")[0])

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, StdOut, …)."""
        p = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], env=self.env, capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise SlurmError(f"scontrol show job {job_id}: {p.stderr.strip()}")
        return dict(re.findall(r"(\w+)=(\S*)", p.stdout))

    def wait(self, job_id, timeout=300, states=DONE_STATES, hurry_requeued=False):
        """Polls until the job reaches one of `states`. Slurm holds a requeued job for about two minutes
        (Reason=BeginTime); hurry_requeued makes it eligible 3 s later instead (scontrol update
        StartTime=now+3), once per restart. Not at once: a relaunch in the second of the requeue is
        refused by slurmd ("Job credential revoked") and the job fails."""
        deadline = time.time() + timeout
        hurried = set()
        while time.time() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            if info.get("JobState") == "PENDING" and info.get("Reason") in NEVER_RUNS:
                raise SlurmError(f"job {job_id} can never run here (Reason={info['Reason']}): {info}")
            restarts = info.get("Restarts")
            if hurry_requeued and info.get("JobState") == "PENDING" and info.get("Reason") == "BeginTime" \
                    and restarts not in hurried:
                self.scontrol("update", f"JobId={job_id}", "StartTime=now+3")
                hurried.add(restarts)
            time.sleep(0.2)
        subprocess.run(["scancel", str(job_id)], env=self.env)
        raise SlurmError(f"job {job_id} not done after {timeout} s: {self.job(job_id)}")

    def scontrol(self, *args):
        return subprocess.run(["scontrol", *map(str, args)], env=self.env, capture_output=True, text=True,
                              check=True).stdout

    def scancel(self, *args):
        subprocess.run(["scancel", *map(str, args)], env=self.env, check=True, capture_output=True)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie child of ours counts as gone
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
