#!/usr/bin/env bash
# The whole test matrix of tox.ini (every supported stack), two environments at a time, then each
# environment's wall time, counts and slowest tests, and one closing line of totals.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet "tox>=4" "tox-uv>=1.11"
# The Python 3.9 and 3.10 environments: where the extra Pythons come from pyenv, the bare
# python3.9/python3.10 commands answer only for the versions PYENV_VERSION names.
if command -v pyenv >/dev/null 2>&1 && [ -z "${PYENV_VERSION:-}" ]; then
    versions="$(pyenv version-name)"
    for minor in 3.10 3.9; do
        found="$(pyenv versions --bare | grep -E "^${minor/./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)"
        if [ -n "$found" ]; then versions="$versions:$found"; fi
    done
    export PYENV_VERSION="$versions"
fi
status=0
# Junit files of an earlier run would be counted again.
rm -f .tox/*/log/junit.xml
python -m tox -p 2 "$@" || status=$?
python tools/test_durations.py .tox || status=1
exit "$status"
