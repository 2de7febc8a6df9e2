#!/usr/bin/env bash
# launch/bind.sh — runs between srun (or mpiexec) and the program: binds this rank to one GPU and, when
# the machine has several NUMA nodes with CPUs, to the CPUs (and memory) near that GPU.
# Then it execs the program, so signals (USR1/TERM for save-and-stop) reach the trainer directly.
#
#   srun --mpi=pmi2 launch/bind.sh build/src/train/ulysses-train …
#
# GPU: the local rank (MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID: the first set, the order
# ulysses-train cross-checks in core/topology.hpp, since mpiexec's ranks inherit SLURM_LOCALID) picks one entry of
# the CUDA_VISIBLE_DEVICES that Slurm gave the task (all of the node's GPUs with --gpus-per-node), or GPU
# <local rank> when none is set. Skipped where there is no GPU (/dev/nvidia0 absent) or with
# ULYSSES_BIND_GPU=0 (e.g. when you bind with srun --gpu-bind yourself).
# NUMA: the GPU's NUMA node from sysfs (via its PCI bus id), else local_rank × nodes / ranks_per_node, counting
# only nodes with CPUs (Grace's GPU memory shows as CPU-less nodes); bound with numactl (CPUs and memory), else
# taskset (CPUs), else one warning line. Off with ULYSSES_BIND_NUMA=0. ULYSSES_BIND_VERBOSE=1 prints one line per
# rank. ULYSSES_SYSFS: another /sys (tests).
# It does not set NCCL variables: the sbatch files do, in one visible place.
set -euo pipefail

local_rank=${MPI_LOCALRANKID:-${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-0}}}
local_size=${MPI_LOCALNRANKS:-${OMPI_COMM_WORLD_LOCAL_SIZE:-${SLURM_NTASKS_PER_NODE:-1}}}
local_size=${local_size%%(*}   # SLURM_NTASKS_PER_NODE may read "8(x4)"
gpu=none numa=none

if [[ ${ULYSSES_BIND_GPU:-auto} != 0 && ( -e /dev/nvidia0 || ${ULYSSES_BIND_GPU:-auto} == 1 ) ]]; then
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -ra visible <<< "$CUDA_VISIBLE_DEVICES"
    if ((${#visible[@]} > 1)); then
      if ((local_rank >= ${#visible[@]})); then
        echo "bind.sh: local rank $local_rank but only ${#visible[@]} GPUs visible ($CUDA_VISIBLE_DEVICES)" \
             "— HINT: one task per GPU: --ntasks-per-node equal to --gpus-per-node" >&2
        exit 2
      fi
      gpu=${visible[local_rank]}
    else
      gpu=${visible[0]}   # already bound to one GPU (srun --gpu-bind / --gpus-per-task)
    fi
  else
    gpu=$local_rank
  fi
  export CUDA_VISIBLE_DEVICES=$gpu
fi

# The NUMA node of this rank's GPU: sysfs by its PCI bus id, else spread local ranks over the nodes; only nodes
# with CPUs count (Grace shows its GPUs' memory as CPU-less NUMA nodes, which must never be picked).
sys=${ULYSSES_SYSFS:-/sys}
cmd=("$@")
if [[ ${ULYSSES_BIND_NUMA:-1} != 0 ]]; then
  shopt -s nullglob
  cpu_nodes=()   # node numbers with CPUs, and their CPU lists
  declare -A cpus_of=()
  for dir in "$sys"/devices/system/node/node[0-9]*; do
    list=$(< "$dir/cpulist")
    [[ -n $list ]] || continue
    n=${dir##*/node}
    cpu_nodes+=("$n")
    cpus_of[$n]=$list
  done
  if ((${#cpu_nodes[@]} > 1)); then
    if [[ $gpu != none ]] && command -v nvidia-smi >/dev/null; then
      bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$gpu" 2>/dev/null | tr 'A-F' 'a-f' || true)
      bus=${bus#0000}   # nvidia-smi prints 8 hex digits of domain, sysfs 4
      [[ -n $bus && -r $sys/bus/pci/devices/$bus/numa_node ]] && numa=$(< "$sys/bus/pci/devices/$bus/numa_node")
    fi
    if [[ $numa == none || -z ${cpus_of[$numa]+x} ]]; then   # no node, -1, or a CPU-less one
      numa=${cpu_nodes[local_rank * ${#cpu_nodes[@]} / (local_size > 0 ? local_size : 1) % ${#cpu_nodes[@]}]}
    fi
    if command -v numactl >/dev/null; then
      cmd=(numactl "--cpunodebind=$numa" "--preferred=$numa" "$@")
    elif command -v taskset >/dev/null; then   # CPUs only: memory follows first touch
      cmd=(taskset -c "${cpus_of[$numa]}" "$@")
    else
      echo "bind.sh: neither numactl nor taskset is installed: rank $local_rank is not bound to NUMA node $numa's" \
           "CPUs — HINT: install numactl, or set ULYSSES_BIND_NUMA=0 to bind otherwise" >&2
      numa=none
    fi
  fi
fi

if [[ ${ULYSSES_BIND_VERBOSE:-0} == 1 ]]; then
  echo "bind.sh: ${SLURMD_NODENAME:-$(hostname)} rank ${SLURM_PROCID:-${PMI_RANK:-?}} local $local_rank/$local_size -> gpu $gpu, numa $numa" >&2
fi
exec "${cmd[@]}"
