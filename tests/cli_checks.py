"""What the command-line tests of several tools check alike (imported by tests/*/test_*_cli.py).

BadInputCase: a test case with a fresh temporary folder per test (self.root) and self.out inside it.
one_error_line: a failed run printed exactly one "error:" line naming every needle and left nothing behind.
small_tmpfs: a tiny tmpfs mounted for the duration of a with-block, to test a full output filesystem (root).
"""
import contextlib
import pathlib
import subprocess
import tempfile
import unittest


class BadInputCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        self.out = self.root / "out"

    def tearDown(self):
        self.tmp.cleanup()


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
