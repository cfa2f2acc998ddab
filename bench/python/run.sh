#!/usr/bin/env bash
# The Python report, on a GPU machine: the Rust all-reduce and the Python op in one session, two processes
# sharing GPU 0 under MPS (started here, stopped at the end). Needs the `ferrocomm` command (BIN), torch and
# the ferrocomm wheel installed in the Python that runs torchrun. Usage: bash bench/python/run.sh OUT_DIR [BIN]
set -euo pipefail
out=${1:?usage: run.sh OUT_DIR [FERROCOMM_BIN]}
bin=${2:-ferrocomm}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mpslog}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
trap 'echo quit | nvidia-cuda-mps-control' EXIT
export FERROCOMM_RANKS_PER_GPU=2
sizes=${SIZES:-8KiB,1MiB,16MiB}
# The Rust figures: graph replay, then eager (a run with --no-graph).
"$bin" launch -n 2 -- "$bin" bench --ops all-reduce --modes gpu --dtype bf16 --sizes "$sizes" --gpus 0 --out "$out/rust"
"$bin" launch -n 2 -- "$bin" bench --ops all-reduce --modes gpu --dtype bf16 --sizes "$sizes" --gpus 0 --no-graph \
  --out "$out/rust-eager"
torchrun --nproc-per-node 2 "$here/bench_ops.py" --sizes "$sizes" --out "$out/python.json"
python3 "$here/report.py" "$out/rust/data.json,$out/rust-eager/data.json" "$out/python.json" "$out"
