"""launch/bind.sh picks a rank's GPU by the launcher's local-rank variables in the order the trainer reads
them (core/topology.hpp kLocalRankVariables): MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK, then SLURM_LOCALID,
which mpiexec's ranks inherit from the allocation. The table is the one tests/core/test_topology.cpp checks.

usage: python3 test_bind.py REPO_ROOT
"""
import os
import subprocess
import sys
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


if __name__ == "__main__":
    unittest.main()
