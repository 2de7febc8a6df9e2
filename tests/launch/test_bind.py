"""launch/bind.sh picks a rank's GPU by the launcher's local-rank variables in the order the trainer reads
them (core/topology.hpp kLocalRankVariables): MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK, then SLURM_LOCALID,
which mpiexec's ranks inherit from the allocation. The table is the one tests/core/test_topology.cpp checks.
Its NUMA binding is checked on made-up machines (a sysfs tree, nvidia-smi, numactl and taskset stand-ins that
print what they were asked): the GPU's node from its PCI bus id, CPU-less nodes (Grace's GPU memory) never
picked, taskset without numactl, one warning line with neither.

usage: python3 test_bind.py REPO_ROOT
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = sys.argv.pop(1) if len(sys.argv) > 1 else os.getcwd()
VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
TABLE = [  # (environment, local rank bind.sh must use)
    ({}, 0),
    ({"SLURM_LOCALID": "3"}, 3),
    ({"SLURM_LOCALID": "0", "MPI_LOCALRANKID": "2"}, 2),
    ({"SLURM_LOCALID": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "5"}, 5),
    ({"MPI_LOCALRANKID": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "7"}, 1),
]


def bind(env_extra, visible="10,11,12,13,14,15,16,17"):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(env_extra, ULYSSES_BIND_GPU="1", ULYSSES_BIND_NUMA="0", CUDA_VISIBLE_DEVICES=visible)
    return subprocess.run(["bash", os.path.join(REPO, "launch", "bind.sh"), "printenv", "CUDA_VISIBLE_DEVICES"],
                          env=env, capture_output=True, text=True, timeout=30)


class Bind(unittest.TestCase):
    def test_gpu_follows_the_local_rank_variables_in_order(self):
        for env, local in TABLE:
            with self.subTest(env=env):
                r = bind(env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.strip(), str(10 + local))

    def test_more_ranks_than_gpus_is_one_line_exit_2(self):
        r = bind({"MPI_LOCALRANKID": "4"}, visible="0,1,2,3")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("local rank 4 but only 4 GPUs visible", r.stderr)


def machine(root, nodes, gpu_numa):
    """A sysfs tree under root: NUMA node i with CPU list nodes[i] ('' = CPU-less), and GPU 0 at PCI bus
    0000:1b:00.0 on NUMA node gpu_numa; bin/ holds nvidia-smi (that bus id) and the tools bind.sh may call."""
    for i, cpus in enumerate(nodes):
        d = root / f"sys/devices/system/node/node{i}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    pci = root / "sys/bus/pci/devices/0000:1b:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text(f"{gpu_numa}\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 00000000:1B:00.0\n")
    for tool in ("tr", "printenv"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def stand_in(bin_dir, tool):
    """tool prints its name and arguments instead of binding."""
    (bin_dir / tool).write_text(f"#!/bin/sh\necho {tool} \"$@\"\n")
    (bin_dir / tool).chmod(0o755)


class Numa(unittest.TestCase):
    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp())

    def tearDown(self):
        shutil.rmtree(self.root)

    def bind(self, nodes, gpu_numa, tools, local="0", size="2"):
        bin_dir = machine(self.root, nodes, gpu_numa)
        for tool in tools:
            stand_in(bin_dir, tool)
        env = {"PATH": str(bin_dir), "ULYSSES_SYSFS": str(self.root / "sys"), "ULYSSES_BIND_GPU": "1",
               "CUDA_VISIBLE_DEVICES": "0", "MPI_LOCALRANKID": local, "MPI_LOCALNRANKS": size}
        return subprocess.run([shutil.which("bash"), os.path.join(REPO, "launch", "bind.sh"), "printenv",
                               "CUDA_VISIBLE_DEVICES"], env=env, capture_output=True, text=True, timeout=30)

    def test_the_gpus_node_from_its_bus_id(self):
        r = self.bind(["0-3", "4-7"], 1, ["numactl", "taskset"])
        self.assertEqual(r.stdout.strip(), "numactl --cpunodebind=1 --preferred=1 printenv CUDA_VISIBLE_DEVICES")

    def test_cpu_less_nodes_are_never_picked(self):
        # Grace Hopper: CPUs on nodes 0 and 1, the GPUs' memory as CPU-less nodes 2..9; the GPU reports node 4
        nodes = ["0-71", "72-143"] + [""] * 8
        for local, want in (("0", 0), ("1", 1)):
            r = self.bind(nodes, 4, ["numactl"], local=local)
            self.assertEqual(r.stdout.split()[:2], ["numactl", f"--cpunodebind={want}"], (local, r.stdout, r.stderr))
            shutil.rmtree(self.root)
            self.root.mkdir()

    def test_taskset_without_numactl(self):
        r = self.bind(["0-3", "4-7"], 1, ["taskset"])
        self.assertEqual(r.stdout.strip(), "taskset -c 4-7 printenv CUDA_VISIBLE_DEVICES")

    def test_neither_is_one_warning_line(self):
        r = self.bind(["0-3", "4-7"], 1, [])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "0")   # the program ran, unbound
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("neither numactl nor taskset is installed: rank 0 is not bound to NUMA node 1", r.stderr)


if __name__ == "__main__":
    unittest.main()
