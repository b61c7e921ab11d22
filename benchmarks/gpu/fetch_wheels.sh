#!/usr/bin/env bash
# Companion step of run.sh, on a machine with network: download the wheels a device machine
# without network may lack, for CPython 3.12 manylinux x86-64, into benchmarks/gpu/wheels/
# (ignored by git; carry it with the working tree).  The GPU tests and bench need none of
# the optional extras and never build HNSW, so hnswlib (published as an sdist only, which
# an offline machine without a compiler cannot build) is not needed there; tqdm is what the
# core imports to show progress.  Keep the folder small: the tree that travels is limited
# to 64 MiB.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p wheels
python3 -m pip download --only-binary=:all: --no-deps --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d wheels "tqdm>=4.60"
du -sh wheels
