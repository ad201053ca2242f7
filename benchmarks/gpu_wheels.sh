#!/usr/bin/env bash
# The wheels a GPU machine without a network may lack, fetched where pip reaches PyPI into
# .whl/ (git-ignored through .git/info/exclude), for benchmarks/gpu_session.sh to install
# there. The H100 records' machine (Python 3.12, torch 2.11, torchvision 0.26, with
# safetensors, tqdm, jaxtyping, rich and typing-extensions) has no tyro, which
# `python -m capsnotes train` builds its options with, nor tyro's docstring-parser and
# typeguard. typing-extensions comes too: typeguard needs 4.14 or later.
#
# pytest and its needs go to .whl/pytest/, which gpu_session.sh installs only on a machine
# without pytest (its measure, seeds and campaign stages run GPU tests with it, and the
# preflight checks that it imports): a machine's own pytest, with its plugins, stays the
# one that runs. No pytest-xdist: gpu_session.sh runs the GPU tests in one process,
# without pyproject.toml's addopts (`-o addopts=`), whose `-n 2` would need it.
#
#   bash benchmarks/gpu_wheels.sh          # then copy .whl/ to the GPU machine and run
#   bash benchmarks/gpu_session.sh preflight h100
#
# The versions are those this repository's tests run with (constraints/test.txt); all are
# pure-Python wheels (py3-none-any), the same for every machine.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
WHEELS=(tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 typing-extensions==4.16.0)
PYTEST_WHEELS=(pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0)
mkdir -p .git/info .whl/pytest
grep -qxF /.whl/ .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
download() {  # download FOLDER WHEEL...
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --dest "$@"
}
download .whl "${WHEELS[@]}"
download .whl/pytest "${PYTEST_WHEELS[@]}"
ls -lR .whl
