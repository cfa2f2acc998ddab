#!/usr/bin/env bash
# Builds and runs every anchor script on this machine's GPUs, saves each one's raw output as
# OUTDIR/<name>.txt (stderr in OUTDIR/<name>.log), and prints the --anchors arguments for ferrocomm bench.
#
#   bash bench/anchors/run.sh OUTDIR
#
# What the GPU count cannot run is skipped with the reason printed (and kept in OUTDIR/run.txt). With one
# GPU it also probes what two ranks sharing that GPU do (NCCL, symm_mem, NVSHMEM); those outputs go to
# OUTDIR/*_shared_gpu.txt and are never offered as anchors.
#
# Environment (all optional):
#   PYTHON             the Python with torch (default: python3)
#   NVCC               the CUDA compiler (default: nvcc on PATH, else $CUDA_HOME/bin/nvcc, else the one in
#                      torch's site-packages under nvidia/cu13/bin)
#   NVSHMEM_HOME       NVSHMEM's include/ and lib/ (default: nvidia/nvshmem in torch's site-packages)
#   ANCHORS_INCLUDE    extra header folders, colon-separated, used when the defaults lack them (the
#                      NVSHMEM headers, or CCCL's nv/target, on an install without them)
#   ANCHORS_WORLD      GPUs for the torch scripts (default: all)
#   ANCHORS_TIMEOUT    seconds one step may take (default 600); ANCHORS_PROBE_TIMEOUT, one probe (90)
#
# No multicast anywhere: NVLS and multicast are switched off in NCCL, torch symm_mem and NVSHMEM, and
# none of the programs calls cuMulticastCreate.
set -uo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1" || exit 1
OUT=$(cd "$1" && pwd)
BUILD="$OUT/build"
mkdir -p "$BUILD"
LOG="$OUT/run.txt"
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }

export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1
# One node: NVSHMEM needs no network transport, and its unique-ID bootstrap talks over loopback.
export NVSHMEM_REMOTE_TRANSPORT="${NVSHMEM_REMOTE_TRANSPORT:-none}"
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME="${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}"
export NVSHMEM_SYMMETRIC_SIZE="${NVSHMEM_SYMMETRIC_SIZE:-2G}"

PYTHON="${PYTHON:-python3}"
STEP_TIMEOUT="${ANCHORS_TIMEOUT:-600}"
PROBE_TIMEOUT="${ANCHORS_PROBE_TIMEOUT:-90}"

SITE=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
if [ -z "$SITE" ]; then
    say "# run.sh: no torch in $PYTHON: the torch scripts will be skipped"
fi

# GPUs and their compute capability.
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${NGPU:-0}" -eq 0 ] && [ -n "$SITE" ]; then
    NGPU=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
fi
if [ "${NGPU:-0}" -eq 0 ]; then
    say "# run.sh: no GPU visible: nothing to run"
    exit 1
fi
CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
ARCH="sm_${CC:-90}"
say "# run.sh: $NGPU GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) ($ARCH)"
say "# run.sh: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"

# The compiler.
if [ -z "${NVCC:-}" ]; then
    if command -v nvcc >/dev/null 2>&1; then
        NVCC=$(command -v nvcc)
    elif [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
        NVCC="$CUDA_HOME/bin/nvcc"
    elif [ -n "$SITE" ] && [ -x "$SITE/nvidia/cu13/bin/nvcc" ]; then
        NVCC="$SITE/nvidia/cu13/bin/nvcc"
    fi
fi
if [ -z "${NVCC:-}" ]; then
    say "# run.sh: no nvcc found (set NVCC): the CUDA C++ programs will be skipped"
fi

# Header folders the defaults may lack: each ANCHORS_INCLUDE folder is added only when a test compile
# needs it, so a complete install is built exactly as it is.
EXTRA_INC=()
needs_header() {  # needs_header HEADER [FLAGS...]: true when HEADER does not compile with the flags so far
    local header=$1
    shift
    printf '#include <%s>\nint main() { return 0; }\n' "$header" >"$BUILD/probe.cu"
    ! "$NVCC" -arch="$ARCH" "$@" "${EXTRA_INC[@]}" -c "$BUILD/probe.cu" -o "$BUILD/probe.o" >/dev/null 2>&1
}
add_fallback() {  # add_fallback HEADER [FLAGS...]: adds the first ANCHORS_INCLUDE folder holding HEADER
    local header=$1 dir
    IFS=: read -r -a dirs <<<"${ANCHORS_INCLUDE:-}"
    for dir in "${dirs[@]}"; do
        if [ -e "$dir/$header" ]; then
            EXTRA_INC+=("-isystem" "$dir")
            say "# run.sh: $header taken from ANCHORS_INCLUDE folder $dir (the install lacks it)"
            return 0
        fi
    done
    return 1
}

run_step() {  # run_step NAME TIMEOUT COMMAND...: stdout to OUT/NAME.txt, stderr to OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    say "# run.sh: $name: $*"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>"$OUT/$name.log"
    local rc=$?
    cat "$OUT/$name.txt"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        say "# run.sh: $name: stopped after ${limit} s (timeout)"
    elif [ $rc -ne 0 ]; then
        say "# run.sh: $name: exit status $rc; last lines of $name.log:"
        tail -n 8 "$OUT/$name.log" | sed 's/^/#   /' | tee -a "$LOG"
    fi
    say "# run.sh: $name: $((SECONDS - t0)) s"
    return $rc
}

ANCHORS=()
offer() {  # offer NAME: propose OUT/NAME.txt as an anchor file when it holds figures
    if grep -qE '^(ref pingpong .* one-way [0-9.]+ us|nvshmem .* (one-way|time) [0-9.]+ us|torch .*: [0-9.]+ us)' \
        "$OUT/$1.txt" 2>/dev/null; then
        ANCHORS+=("$OUT/$1.txt")
    fi
}

# 1. CUDA C++ flag ping-pong: one GPU (two blocks) always, a GPU pair when there are two.
if [ -n "${NVCC:-}" ]; then
    if "$NVCC" -O3 -arch="$ARCH" -o "$BUILD/flag_pingpong" "$HERE/flag_pingpong.cu" >"$BUILD/flag_pingpong.build.log" 2>&1; then
        run_step flag_pingpong "$STEP_TIMEOUT" "$BUILD/flag_pingpong"
        offer flag_pingpong
    else
        say "# run.sh: flag_pingpong: build failed:"
        tail -n 20 "$BUILD/flag_pingpong.build.log" | sed 's/^/#   /' | tee -a "$LOG"
    fi
fi

# 2. NVSHMEM put+signal ping-pong and put bandwidth.
NVSHMEM_HOME="${NVSHMEM_HOME:-${SITE:+$SITE/nvidia/nvshmem}}"
if [ -n "$SITE" ]; then
    say "# run.sh: torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null), NVSHMEM wheel $("$PYTHON" -c \
        'import importlib.metadata as m; print(m.version("nvidia-nvshmem-cu13"))' 2>/dev/null || echo '(none)'), nvcc $("${NVCC:-false}" --version 2>/dev/null | grep -o 'release [0-9.]*')"
fi
nvshmem_built=0
if [ -n "${NVCC:-}" ] && [ -n "$NVSHMEM_HOME" ] && [ -e "$NVSHMEM_HOME/lib/libnvshmem_device.a" ]; then
    NVSHMEM_INC=()
    if [ -e "$NVSHMEM_HOME/include/nvshmem.h" ]; then
        NVSHMEM_INC=("-I$NVSHMEM_HOME/include")
        say "# run.sh: NVSHMEM headers: $NVSHMEM_HOME/include (shipped with the install)"
    else
        IFS=: read -r -a dirs <<<"${ANCHORS_INCLUDE:-}"
        for dir in "${dirs[@]}"; do
            if [ -e "$dir/nvshmem.h" ]; then NVSHMEM_INC=("-I$dir"); break; fi
        done
        if [ ${#NVSHMEM_INC[@]} -eq 0 ]; then
            say "# run.sh: nvshmem_bench: skipped: $NVSHMEM_HOME has no include/nvshmem.h and no ANCHORS_INCLUDE folder has one"
        else
            say "# run.sh: NVSHMEM headers: ${NVSHMEM_INC[0]#-I} (the install ships none)"
        fi
    fi
    if [ ${#NVSHMEM_INC[@]} -gt 0 ]; then
        if needs_header cuda_fp16.h && ! add_fallback nv/target; then
            say "# run.sh: cuda_fp16.h does not compile here (CCCL's nv/target missing?); trying anyway"
        fi
        for lib in "$NVSHMEM_HOME"/lib/libnvshmem_host.so*; do HOSTLIB=$(basename "$lib"); break; done
        if "$NVCC" -O3 -arch="$ARCH" -rdc=true "${NVSHMEM_INC[@]}" "${EXTRA_INC[@]}" "$HERE/nvshmem_bench.cu" \
            -o "$BUILD/nvshmem_bench" -L"$NVSHMEM_HOME/lib" -Xlinker -rpath="$NVSHMEM_HOME/lib" \
            -l:"$HOSTLIB" -lnvshmem_device >"$BUILD/nvshmem_bench.build.log" 2>&1; then
            nvshmem_built=1
        else
            say "# run.sh: nvshmem_bench: build failed:"
            tail -n 20 "$BUILD/nvshmem_bench.build.log" | sed 's/^/#   /' | tee -a "$LOG"
        fi
    fi
elif [ -n "${NVCC:-}" ]; then
    say "# run.sh: nvshmem_bench: skipped: no NVSHMEM at '${NVSHMEM_HOME}' (lib/libnvshmem_device.a; set NVSHMEM_HOME)"
fi

nvshmem_pes() {  # nvshmem_pes N GPU_OVERRIDE ARGS...: N PEs of nvshmem_bench, PE 0's stdout on ours
    local n=$1 gpu=$2 pids=() rc=0 r
    shift 2
    rm -f "$BUILD/nvshmem.uid"
    for ((r = n - 1; r >= 0; r--)); do
        if [ $r -eq 0 ]; then
            env RANK=0 WORLD_SIZE="$n" LOCAL_RANK=0 NVSHMEM_BENCH_UID_FILE="$BUILD/nvshmem.uid" \
                ${gpu:+NVSHMEM_BENCH_GPU=$gpu} "$BUILD/nvshmem_bench" "$@" &
        else
            env RANK="$r" WORLD_SIZE="$n" LOCAL_RANK="$r" NVSHMEM_BENCH_UID_FILE="$BUILD/nvshmem.uid" \
                ${gpu:+NVSHMEM_BENCH_GPU=$gpu} "$BUILD/nvshmem_bench" "$@" >/dev/null &
        fi
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=$?; done
    return $rc
}
export -f nvshmem_pes
export BUILD

if [ $nvshmem_built -eq 1 ]; then
    if [ "$NGPU" -ge 2 ]; then
        run_step nvshmem_bench "$STEP_TIMEOUT" bash -c 'nvshmem_pes 2 ""'
    else
        say "# run.sh: nvshmem_bench: one GPU: one PE putting to itself (labelled [self 1 PE])"
        run_step nvshmem_bench "$STEP_TIMEOUT" bash -c 'nvshmem_pes 1 ""'
        say "# run.sh: nvshmem_shared_gpu: probe: two PEs on GPU 0 (not an anchor)"
        run_step nvshmem_shared_gpu "$PROBE_TIMEOUT" bash -c 'nvshmem_pes 2 0 --iters 200 --warmup 20 --repeats 1'
    fi
    offer nvshmem_bench
fi

# 3. and 4. torch: symm_mem all-reduce and NCCL collectives, one process per GPU.
WORLD="${ANCHORS_WORLD:-$NGPU}"
TORCHRUN=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node)
if [ -n "$SITE" ]; then
    if [ "$NGPU" -ge 2 ] && [ "$WORLD" -ge 2 ]; then
        run_step symm_mem "$STEP_TIMEOUT" "${TORCHRUN[@]}" "$WORLD" "$HERE/symm_mem.py"
        offer symm_mem
        run_step nccl_torch "$STEP_TIMEOUT" "${TORCHRUN[@]}" "$WORLD" "$HERE/nccl_torch.py"
        offer nccl_torch
    else
        say "# run.sh: symm_mem, nccl_torch: skipped: they need two GPUs, one process each ($NGPU visible)."
        say "# run.sh: probes of two ranks on GPU 0 follow (not anchors):"
        run_step nccl_torch_shared_gpu "$PROBE_TIMEOUT" "${TORCHRUN[@]}" 2 "$HERE/nccl_torch.py" --gpu 0 \
            --ops all_reduce --modes eager --max-bytes 1024 --repeats 1
        run_step symm_mem_shared_gpu "$PROBE_TIMEOUT" "${TORCHRUN[@]}" 2 "$HERE/symm_mem.py" --gpu 0 \
            --max-bytes 8192 --repeats 1
    fi
fi

say ""
if [ ${#ANCHORS[@]} -eq 0 ]; then
    say "# run.sh: no anchor figures were produced"
    exit 1
fi
ARGS=""
for f in "${ANCHORS[@]}"; do ARGS+=" --anchors $f"; done
say "# run.sh: anchor arguments for ferrocomm bench (also in $OUT/anchors.args):"
say "$ARGS"
echo "$ARGS" >"$OUT/anchors.args"
say "# e.g.: ferrocomm bench --out bench$ARGS"
