#!/usr/bin/env bash
# pyright --verifytypes evireform --ignoreexternal on the package as a user installs it: the
# wheel's files in a fresh venv with the core dependencies (pyright cannot follow an
# editable install).  Needs python3, node and npm (pyright comes from the npm registry).
#   bash scripts/type_completeness.sh [--json OUT]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q numpy scipy numba tqdm markdown-it-py >/dev/null
"$WORK/venv/bin/pip" install -q --no-deps "$ROOT" >/dev/null
(cd "$WORK" && npm install -q --no-audit --no-fund pyright@1.1.414 >/dev/null 2>&1)
cd "$WORK"
if [ "${1:-}" = "--json" ]; then
  VIRTUAL_ENV="$WORK/venv" PATH="$WORK/venv/bin:$PATH" node_modules/.bin/pyright \
    --verifytypes evireform --ignoreexternal --outputjson > "$2" || true
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['typeCompleteness']; print(f\"type completeness {100*d['completenessScore']:.1f} %\", d['exportedSymbolCounts'])" "$2"
else
  VIRTUAL_ENV="$WORK/venv" PATH="$WORK/venv/bin:$PATH" node_modules/.bin/pyright \
    --verifytypes evireform --ignoreexternal | grep -E "^(Type completeness|Symbols exported|  With)" || true
fi
