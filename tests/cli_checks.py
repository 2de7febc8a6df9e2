"""What the command-line tests of several tools check alike (imported by tests/*/test_*_cli.py).

TempDirCase: a test case with a fresh temporary folder per test (self.root) and self.out inside it;
BadInputCase is the same, named for the bad-input tests.
one_error_line: a failed run printed exactly one "error:" line naming every needle and left nothing behind.
small_tmpfs: a tiny tmpfs mounted for the duration of a with-block, to test a full output filesystem (root).
PackedSample: a test class whose runs share the sample corpus packed once for the tiny Llama (trainer tests).
losses: the per-step losses a training run wrote to metrics.jsonl.
kill_mid_write: SIGKILL a command while its temporary output is being written (crash-safety tests).
"""
import contextlib
import glob
import json
import os
import pathlib
import signal
import time
import subprocess
import tempfile
import unittest


ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "datasets/sample/licenses.jsonl.gz"
TINY_CONFIG = ROOT / "datasets/sample/tiny-llama/config.json"


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        self.out = self.root / "out"

    def tearDown(self):
        self.tmp.cleanup()


class BadInputCase(TempDirCase):
    pass


def one_error_line(test, stderr, needles, out):
    """The single "error:" line of stderr; it names every needle, and neither `out` nor a temporary of it
    (".out…" beside it) exists."""
    lines = [l for l in stderr.splitlines() if l.startswith("error:")]
    test.assertEqual(len(lines), 1, stderr)
    for n in needles:
        test.assertIn(str(n), lines[0])
    test.assertFalse(out.exists())
    test.assertEqual([x for x in out.parent.iterdir() if x.name.startswith("." + out.name)], [])
    return lines[0]


@contextlib.contextmanager
def small_tmpfs(test, path, size="256k"):
    """Mounts a tmpfs of `size` at the new folder `path` (needs root) and unmounts it afterwards."""
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    test.assertEqual(subprocess.run(mount).returncode, 0, "cannot mount a tmpfs (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)])


class PackedSample(unittest.TestCase):
    """Packs the sample corpus once per class into cls.data (under cls.root, removed afterwards): SEQ_LEN
    tokens, SP=4 alignment, checked against the tiny Llama's config, with the subclass's PACK binary."""
    PACK = None
    SEQ_LEN = 256

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        cls.data = cls.root / "packed"
        subprocess.run(list(map(str, [cls.PACK, "pack", SAMPLE, "-o", cls.data, "--seq-len", cls.SEQ_LEN, "--sp", 4,
                                      "--pad-id", 258, "--model-config", TINY_CONFIG])),
                       check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_ok(self, cmd, code=0, **kw):
        """Runs cmd (any items, made strings) and checks its exit code; the process result."""
        p = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=600, **kw)
        self.assertEqual(p.returncode, code, p.stderr[-3000:])
        return p


THREE_DOCUMENTS = [[(i * 37 + 11 * d) % 300 for i in range(n)] for d, n in enumerate((100, 80, 50))]   # 256 tokens


class PackedDocuments(TempDirCase):
    """THREE_DOCUMENTS packed once per class into cls.data as one sequence of 256 tokens (SP 4 alignment, vocabulary
    320) with the subclass's PACK binary; cls.shared: a folder the class's tests share (removed afterwards)."""
    PACK = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.shared = pathlib.Path(cls.tmp.name)
        docs = cls.shared / "docs.jsonl"
        docs.write_text("".join(json.dumps({"input_ids": d}) + "\n" for d in THREE_DOCUMENTS))
        cls.data = cls.shared / "packed"
        subprocess.run(list(map(str, [cls.PACK, "pack", docs, "-o", cls.data, "--seq-len", 256, "--sp", 4,
                                      "--vocab-size", 320])), check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


def train_command(train, mpiexec, n, data, out, *extra, lr=3e-3):
    """mpiexec -n N ulysses-train on `data` with the tiny Llama into `out`: a thread a rank, a short warm-up."""
    return [mpiexec, "-n", str(n), train, "--data", str(data), "--model-config", str(TINY_CONFIG), "--output", str(out),
            "--threads", "1", "--lr", str(lr), "--warmup", "2", *map(str, extra)]


def losses(out):
    return [json.loads(l)["loss"] for l in (out / "metrics.jsonl").read_text().splitlines()]


def kill_mid_write(cmd, watch, attempts=3):
    """Runs cmd in a new session; the moment a path matching the glob `watch` (a file inside its temporary
    output) exists, freezes the whole session (SIGSTOP) and kills it (SIGKILL). True when it was caught while
    still running; a run that finished first is retried, up to `attempts` times, then False."""
    for _ in range(attempts):
        p = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
        while p.poll() is None and not glob.glob(str(watch)):
            time.sleep(0.0005)
        caught = False
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGSTOP)
            caught = p.poll() is None
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        if caught:
            return True
    return False
