#!/usr/bin/env bash
# The wheel as a user installs it: built from the checkout, installed into a fresh virtual
# environment outside it (torch comes from the local disk, pinned by constraints.txt), then the
# demo, doctor's environment and a doctor scan with SARIF run from a folder that has no checkout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel --quiet --no-deps -w "$work/dist" "$root"
wheel="$(ls "$work"/dist/torch_repro_check-*.whl)"
echo "wheel-check: built $(basename "$wheel")"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet -c "$root/constraints.txt" "$wheel"
cd "$work"
mkdir project && cd project
# the installed package, not the checkout's
"$work/venv/bin/python" - "$root" <<'PY'
import sys
import repro_check
assert not repro_check.__file__.startswith(sys.argv[1]), repro_check.__file__
print(f"wheel-check: repro_check imported from {repro_check.__file__}")
PY
"$work/venv/bin/repro-check" repro_check.workloads.mnist:main --seed 123
"$work/venv/bin/repro-check" doctor
printf 'import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n' > train.py
set +e
"$work/venv/bin/repro-check" doctor --no-env --sarif doctor.sarif train.py
code=$?
set -e
[ "$code" -eq 1 ] || { echo "wheel-check: doctor on a hazard exited $code, not 1"; exit 1; }
grep -q '"ruleId": "RC118"' doctor.sarif
echo "wheel-check: demo, doctor and doctor --sarif ran from the installed wheel"
