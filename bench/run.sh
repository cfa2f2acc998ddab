#!/usr/bin/env bash
# The committed report in one run on the GPUs it measures: the anchor programs (bench/anchors/run.sh), then
# `ferrocomm bench` with their figures beside its own. The anchors' raw output stays in the report folder
# (OUTDIR/anchors/), beside the parsed figures in OUTDIR/data.json.
#
#   bash bench/run.sh OUTDIR [ferrocomm bench arguments...]    e.g. bash bench/run.sh bench --quick
#
# FERROCOMM names the ferrocomm binary (default: ferrocomm on PATH, else target/release/ferrocomm).
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [ferrocomm bench arguments...]" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$1
shift
ferrocomm=${FERROCOMM:-$(command -v ferrocomm || echo "$here/../target/release/ferrocomm")}
[ -x "$ferrocomm" ] || { echo "bench/run.sh: no ferrocomm binary at $ferrocomm (cargo build --release -p ferrocomm-cli, or set FERROCOMM)" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$out"
anchors=()
if bash "$here/anchors/run.sh" "$out/anchors"; then
    # The report records its command: name the anchor files as OUTDIR was given, not by absolute path.
    read -r -a anchors < <(sed "s#$(cd "$out/anchors" && pwd)#$out/anchors#g" "$out/anchors/anchors.args")
else
    echo "bench/run.sh: the anchor programs produced no figures (see $out/anchors/run.txt); the bench runs without them" >&2
fi
rm -rf "$out/anchors/build"
"$ferrocomm" bench --out "$out" "${anchors[@]}" "$@"
