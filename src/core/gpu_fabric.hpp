// GPU fabric: which multi-node NVLink domain (GB200 NVL72 rack, "clique") a GPU belongs to, as the driver reports it.
// This is what NCCL itself reads to decide whether two GPUs on different nodes talk over NVLink (NCCL_MNNVL_ENABLE):
// NVML's GPU fabric info, a cluster UUID plus a clique id, valid once the fabric manager has registered the GPU.
// Two GPUs share an island exactly when both ids are equal. Topology::measure_islands turns the ids of all ranks
// into islands, replacing the ones computed from --island-size.
//
// NVML (libnvidia-ml.so.1, installed with the driver) is opened at run time, never linked: a machine without the
// driver, a GPU without a fabric (H100 HGX, where NVLink ends at the node) or a driver older than the call answers "".
// Torch-free, MPI-free; the few NVML declarations used are this file's own (the CUDA wheels carry no nvml.h).
#pragma once

#include <string>

namespace ulysses {

// The fabric id of the GPU at this PCI bus id ("0000:18:00.0", CUDA's cudaDeviceGetPCIBusId), as
// "<cluster uuid, 32 hex digits>/<clique id>", e.g. "0123456789abcdef0123456789abcdef/7"; "" when unknown: no bus id,
// no NVML, no fabric on this GPU, its registration not complete, or an all-zero cluster UUID (HGX H100/H200).
std::string gpu_fabric_id(const std::string& pci_bus_id);

}  // namespace ulysses
