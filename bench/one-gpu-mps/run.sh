#!/usr/bin/env bash
# Measures bench/one-gpu-mps: two ranks sharing one GPU under CUDA's Multi-Process Service, in one report.
#
#   bash bench/one-gpu-mps/run.sh [OUTDIR]          (default: this folder)
#
# Series, each from this one run on the same GPU:
#   gpu        one process, two ranks on the GPU (FERROCOMM_RANKS_PER_GPU=2)
#   gpu-procs  two processes, one rank each (`ferrocomm launch -n 2`), the gpu mode's collectives
#   nvshmem    two processes, one NVSHMEM PE each
#   anchors    NVSHMEM's own put+signal ping-pong and put, two PEs on the GPU (nvshmem_bench.cu)
# Processes sharing a GPU need MPS: without it their kernels take turns (about 2 ms a switch) and a kernel
# waiting for the other process's never sees it run. The script starts the daemon (root) unless one serves
# CUDA_MPS_PIPE_DIRECTORY already, and stops the one it started.
#
# Environment (optional): FERROCOMM (the ferrocomm command, default: on PATH), NVCC and NVSHMEM_HOME as for
# bench/anchors/run.sh, SIZES (default: the --quick sizes).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUTDIR=$(mkdir -p "${1:-$HERE}" && cd "${1:-$HERE}" && pwd)
FERROCOMM=${FERROCOMM:-ferrocomm}
work=$(mktemp -d)

# No multicast anywhere; NVSHMEM on one node needs no network transport, and bootstraps over loopback.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVSHMEM_REMOTE_TRANSPORT="${NVSHMEM_REMOTE_TRANSPORT:-none}" NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
export FERROCOMM_RANKS_PER_GPU=2

export CUDA_MPS_PIPE_DIRECTORY="${CUDA_MPS_PIPE_DIRECTORY:-$work/mps-pipe}"
export CUDA_MPS_LOG_DIRECTORY="${CUDA_MPS_LOG_DIRECTORY:-$work/mps-log}"
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if [ ! -S "$CUDA_MPS_PIPE_DIRECTORY/control" ]; then
    nvidia-cuda-mps-control -d
    trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$work"' EXIT
    echo "run.sh: started an MPS daemon ($CUDA_MPS_PIPE_DIRECTORY)"
else
    trap 'rm -rf "$work"' EXIT
fi
"$FERROCOMM" doctor | grep '^MPS:'

sizes=(--quick)
[ -n "${SIZES:-}" ] && sizes=(--sizes "$SIZES")

# The anchor: NVSHMEM's own program, two PEs on GPU 0.
SITE=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null || true)
NVSHMEM_HOME="${NVSHMEM_HOME:-${SITE:+$SITE/nvidia/nvshmem}}"
NVCC="${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
hostlib=$(basename "$(ls "$NVSHMEM_HOME"/lib/libnvshmem_host.so* | head -1)")
"$NVCC" -O3 -arch="sm_$cc" -rdc=true -I"$NVSHMEM_HOME/include" "$HERE/../anchors/nvshmem_bench.cu" \
    -o "$work/nvshmem_bench" -L"$NVSHMEM_HOME/lib" -Xlinker -rpath="$NVSHMEM_HOME/lib" -l:"$hostlib" -lnvshmem_device
for rank in 1 0; do
    env RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank NVSHMEM_BENCH_GPU=0 NVSHMEM_BENCH_UID_FILE="$work/uid" \
        "$work/nvshmem_bench" > "$work/nvshmem_bench.$rank.txt" &
done
wait
cp "$work/nvshmem_bench.0.txt" "$OUTDIR/nvshmem_bench.txt"

"$FERROCOMM" bench --modes gpu "${sizes[@]}" --out "$work/gpu"
"$FERROCOMM" launch -n 2 -- "$FERROCOMM" bench --modes gpu "${sizes[@]}" --merge "$work/gpu/data.json" --out "$work/procs"
"$FERROCOMM" launch -n 2 -- "$FERROCOMM" bench --modes nvshmem "${sizes[@]}" --merge "$work/procs/data.json" \
    --anchors "$OUTDIR/nvshmem_bench.txt" --anchor-world 2 --out "$OUTDIR"
