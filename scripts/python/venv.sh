#!/usr/bin/env bash
# Sourced by scripts/install.sh. make_venv DIR REQUIREMENTS [pip options…]: a virtual environment in DIR with exactly
# the pinned packages of REQUIREMENTS, rebuilt only when that file changes. The file's hash is stamped in the venv
# once pip has succeeded, so a half-built venv is never taken for a ready one. Returns non-zero when pip cannot
# install (no registry reachable).

make_venv() {
  local dir=$1 requirements=$2
  shift 2
  local stamp="$dir/.requirements.sha256" want base
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  echo "installing the Python packages of $requirements into $dir…" >&2
  # The torch pin has wheels for CPython 3.10–3.13; the first python3 on PATH is the one the user chose.
  base=$(command -v python3) || return 1
  if ! "$base" -c 'import ensurepip, venv' >/dev/null 2>&1; then apt_install python3-venv || return 1; fi
  rm -rf "$dir"
  if "$base" -m venv "$dir" >&2 && "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" "$@" >&2; then
    echo "$want" > "$stamp"
  else
    rm -rf "$dir"
    return 1
  fi
}
