#!/usr/bin/env bash
# Install size that each framework extra adds on top of the core install, measured in fresh
# virtual environments: core (numpy, numba, scipy, hnswlib, tqdm), then core + the extra.
# Usage: scripts/extra_sizes.sh   (about a minute with a local package mirror)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
size() { du -sm "$1"/lib/python3*/site-packages | cut -f1; }
python3 -m venv "$T/core" && "$T/core/bin/pip" install -q "$ROOT" 2>/dev/null
core=$(size "$T/core")
echo "core install: ${core} MB"
for extra in langchain llamaindex; do
  python3 -m venv "$T/$extra" && "$T/$extra/bin/pip" install -q "$ROOT[$extra]" 2>/dev/null
  s=$(size "$T/$extra")
  echo "[$extra]: ${s} MB, adds $((s - core)) MB"
done
