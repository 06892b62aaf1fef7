#!/usr/bin/env bash
# The whole test suite: lint, types, unit/integration/browser tests, the real-infrastructure lane
# (Debian's nginx + llama.cpp serving SmolLM2, installed by scripts/_real_stack.sh), notebooks.
# `bash scripts/test.sh --skip-real` skips that lane (and its installs) locally.
source "$(dirname "$0")/_env.sh"
if [ ! -x /usr/bin/chromium ]; then
  echo "installing Debian chromium for the browser test" >&2
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation >/dev/null
  fi
fi
case " $* " in
  *" --skip-real "*) echo "real-infrastructure lane skipped (--skip-real)" >&2 ;;
  *) source "$(dirname "$0")/_real_stack.sh" ;;
esac
echo "== ruff"; ruff check contextkit tests benchmarks
echo "== mypy"; mypy contextkit
echo "== docs (mkdocs, strict)"; NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir build/site
echo "== pytest (unit, integration, browser)"; python -m pytest -p no:nbval tests "$@"
echo "== pytest (notebooks)"; python -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=300 notebooks
