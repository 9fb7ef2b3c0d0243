#!/usr/bin/env bash
# Sourced by scripts/install.sh. make_venv [--python INTERPRETER] DIR REQUIREMENTS [pip options…]: a virtual
# environment in DIR with exactly the pinned packages of REQUIREMENTS, built from INTERPRETER (default: the first
# python3 on PATH), rebuilt only when that file changes. The file's hash is stamped in the venv
# once pip has succeeded, so a half-built venv is never taken for a ready one. Returns non-zero when pip cannot
# install (no registry reachable).

make_venv() {
  local base=""
  if [ "${1:-}" = --python ]; then base=$2; shift 2; fi
  local dir=$1 requirements=$2
  shift 2
  local stamp="$dir/.requirements.sha256" want
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  echo "installing the Python packages of $requirements into $dir…" >&2
  # The torch pin has wheels for CPython 3.10–3.13; the first python3 on PATH is the one the user chose.
  [ -n "$base" ] || base=$(command -v python3) || return 1
  if ! "$base" -c 'import ensurepip, venv' >/dev/null 2>&1; then apt_install python3-venv || return 1; fi
  rm -rf "$dir"
  if "$base" -m venv "$dir" >&2 && "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" "$@" >&2; then
    echo "$want" > "$stamp"
  else
    rm -rf "$dir"
    return 1
  fi
}

# make_overlay DIR REQUIREMENTS PYTHON: the pinned packages of REQUIREMENTS, without their dependencies, in DIR (for
# PYTHONPATH, in front of PYTHON's venv), installed by PYTHON's pip and rebuilt only when that file changes.
make_overlay() {
  local dir=$1 requirements=$2 python=$3
  local stamp="$dir/.requirements.sha256" want
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  echo "installing the Python packages of $requirements into $dir…" >&2
  rm -rf "$dir"
  if "$python" -m pip install -q --disable-pip-version-check --no-deps --target "$dir" -r "$requirements" >&2; then
    echo "$want" > "$stamp"
  else
    rm -rf "$dir"
    return 1
  fi
}

# python_minor X.Y: prints a working interpreter of CPython X.Y (pythonX.Y on PATH, else pyenv's newest X.Y.*), or fails.
# A pyenv shim on PATH for a version that is not selected fails when run, so each candidate is run once.
python_minor() {
  local want=$1 candidate root
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  for candidate in "python$want" $(ls -d "$root/versions/$want".*/bin/python 2>/dev/null | sort -rV); do
    candidate=$(command -v "$candidate") || continue
    if [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}
