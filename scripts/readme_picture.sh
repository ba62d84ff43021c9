#!/usr/bin/env bash
# Regenerate docs/images/analyze-training.png, the README's picture of `analyze --plot`:
# simulate the DOMAIN.md worked example (training, T = 4.55 s, D = 0.34; seed 1 for byte-stable
# inputs) into a temporary directory, then analyze its counters, GPU samples and NCCL log.
#
# Usage: scripts/readme_picture.sh [OUT.png]   (commpulse from $COMMPULSE, else .venv, else PATH)
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-docs/images/analyze-training.png}"
if [ -n "${COMMPULSE:-}" ]; then
    commpulse=("$COMMPULSE")
elif [ -x .venv/bin/python ]; then
    commpulse=(.venv/bin/python -m agent)
else
    commpulse=(commpulse)
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$(dirname "$out")"
"${commpulse[@]}" simulate --scenario training --seed 1 --duration 60 --out "$work" >/dev/null
"${commpulse[@]}" analyze \
    --counters "$work/counters.csv" --gpu "$work/gpu.csv" --nccl-log "$work/nccl.log" \
    --plot "$out"
ls -l "$out"
