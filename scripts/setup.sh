#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs, with apt-get, every Debian package Kareus needs to build, test and render its report.
# Idempotent: packages already installed are skipped; runs as root or through sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libeigen3-dev libxgboost-dev nlohmann-json3-dev libyaml-cpp-dev
  libcli11-dev libspdlog-dev libfmt-dev libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format
  libglpk-dev  # the exact mixed-integer reference of tests/pipeline (pipeline_test only)
  python3 python3-dev pybind11-dev python3-pytest python3-jsonschema
  python3-venv python3-pip  # pip install . into a fresh virtualenv (tests/integration/pip_install_test.py)
  openmpi-bin libopenmpi-dev
  python3-torch  # examples/pytorch and its test (PyTorch 1.13, CPU, gloo; about 3 min to install)
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo_cmd=()
elif command -v sudo >/dev/null 2>&1; then
  sudo_cmd=(sudo)
else
  echo "setup: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
