#!/usr/bin/env bash
# layering.sh: the dependency rule of docs/architecture.md, checked on the #include lines of
# src/: each folder may include only the folders listed for it (an arrow only points down),
# and the file-format sources (safetensors, checkpoint_meta) only core. A folder cycle then
# cannot come back unnoticed (CMake's static libraries would hide one).
# usage: layering.sh path/to/src
set -u
SRC=$1
declare -A allowed=(
  [core]="core"
  [kernels]="core kernels"
  [nn]="core kernels nn"
  [models]="core kernels nn models"
  [optim]="core kernels optim"
  [dist]="core dist"
  [parallel]="core kernels nn models optim dist parallel"
  [plan]="core kernels nn models optim dist parallel plan"
  [text]="core text"
  [data]="core text data checkpoint"
  [checkpoint]="core kernels nn models optim dist checkpoint"
  [observe]="core kernels nn models optim dist parallel plan text data checkpoint observe"
  [train]="core kernels nn models optim dist parallel plan text data checkpoint observe train"
)
fail=0
for dir in "${!allowed[@]}"; do
  for f in $(find "$SRC/$dir" -type f); do  # subfolders (kernels/cuda) obey their folder's rule
    for inc in $(grep -hoE '^#include "[a-z_]+/' "$f" | sed 's/#include "//; s/\///' | sort -u); do
      case " ${allowed[$dir]} " in
        *" $inc "*) ;;
        *) echo "FAIL: $f includes $inc/, which $dir/ may not (allowed: ${allowed[$dir]})"; fail=1 ;;
      esac
    done
  done
done
# data/ may use only the file formats of checkpoint/, which depend on core alone.
for f in "$SRC"/data/* "$SRC"/checkpoint/safetensors.* "$SRC"/checkpoint/checkpoint_meta.*; do
  grep -hoE '^#include "checkpoint/[a-z_]+\.h"' "$f" | grep -vE 'safetensors.h|checkpoint_meta.h' |
    sed "s|^|FAIL: $f includes |" | grep . && fail=1
  case "$f" in */checkpoint/*)
    grep -hoE '^#include "[a-z_]+/' "$f" | grep -vE '"(core|checkpoint)/' | sed "s|^|FAIL: $f includes |" | grep . && fail=1 ;;
  esac
done
# models/ is single-device: no identifier names a parallelism (tensor / context / pipeline), outside
# comments and string literals (an HF config key such as "pretraining_tp" is data). Strategies
# reach the model through its runtime (models/model_runtime.h) from src/parallel.
for f in "$SRC"/models/*; do
  sed -e 's://.*$::' -e 's/"\([^"\\]\|\\.\)*"/""/g' "$f" | grep -noE '[A-Za-z_][A-Za-z_0-9]*' |
    grep -E ':((.*_)?(tp|cp|pp)(_.*)?|.*(Tp|Cp|Pp)[A-Z].*|.*[Pp]ipeline.*|.*[Tt]ensor_?[Pp]arallel.*|.*[Cc]ontext_?[Pp]arallel.*)$' |
    sed "s|^|FAIL: $f names a parallelism (line:identifier) |" | grep . && fail=1
done
[ $fail = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
