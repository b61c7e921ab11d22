#!/usr/bin/env bash
# Companion step of run.sh: copy the two MuSiQue files the device retriever test reads
# (tests/test_gpu.py, about 2 MB) from DATA (default ../shared/data) into
# benchmarks/gpu/data/musique/, which git ignores, so that a device run can carry them with
# the working tree; run.sh then points EVIREFORM_DATA there.  The data itself comes from the
# MuSiQue release (see ../shared/data/README); nothing here is committed.
set -euo pipefail
cd "$(dirname "$0")"
DATA="${1:-../../../shared/data}"
mkdir -p data/musique
for f in musique_corpus.json musique.json; do
  cp "$DATA/musique/$f" data/musique/
done
du -sh data
