# Shared set-up for scripts/demo.sh and scripts/test.sh: a local venv with the pinned lock.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "contextkit needs Python 3.11 or newer (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
VENV="$ROOT/.venv"
STAMP="$VENV/.contextkit-lock-$(sha256sum requirements.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  if [ -x "$VENV/bin/python" ]; then
    echo "contextkit: the pinned dependencies changed; updating .venv (about a minute) ..." >&2
  else
    echo "contextkit: first run: installing contextkit and its pinned dependencies into .venv" \
      "(about 2-4 minutes on a fresh machine; later runs start at once) ..." >&2
  fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -r requirements.lock
  "$VENV/bin/python" -m pip install -q --no-deps -e .
  rm -f "$VENV"/.contextkit-lock-*
  touch "$STAMP"
  echo "contextkit: installed." >&2
fi
export PATH="$VENV/bin:$PATH"
export LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_OFFLINE_MODE=true HF_HUB_OFFLINE=1
