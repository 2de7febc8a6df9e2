#!/usr/bin/env bash
# The layers of docs/architecture.md hold: each folder under src/ includes only from the folders below it
# (the table `allowed`), the torch-free folders include no LibTorch header, the MPI-free ones no mpi.h, and
# the torch-free binaries load neither libtorch nor MPI; arrow/parquet headers appear only in the parquet reader.
# usage: check_layers.sh SRC_DIR BINARY...
set -u
src=$1; shift
fail=0
declare -A allowed=(
  [core]="core"
  [io]="core io"
  [arch]="core arch"
  [dist]="core dist"
  [data]="core io data"
  [tokenize]="core tokenize"
  [pack]="core io arch tokenize pack"
  [ckpt]="core io arch ckpt"
  [plan]="core arch plan"
  [comm]="core dist comm"
  [model]="core io arch plan comm model"
  [train]="core io arch plan dist comm data model train"
)
for d in "$src"/*/; do
  d=$(basename "$d")
  if [[ -z ${allowed[$d]+x} ]]; then echo "src/$d is not in the layer table of $0"; fail=1; continue; fi
  # project includes are "folder/file.hpp"; anything whose folder is a layer not allowed here is an upward edge
  while IFS= read -r hit; do
    folder=$(sed -E 's/.*#include *"([a-z_]+)\/.*/\1/' <<<"$hit")
    [[ -d $src/$folder ]] || continue
    if [[ " ${allowed[$d]} " != *" $folder "* ]]; then echo "src/$d may not include $folder/: $hit"; fail=1; fi
  done < <(grep -rnE '#include *"[a-z_]+/' "$src/$d")
done
for d in core io arch dist data tokenize pack ckpt plan; do
  [[ -d $src/$d ]] || continue
  if hits=$(grep -rnE '#include *[<"](torch|ATen|c10)/' "$src/$d"); then
    echo "LibTorch included in torch-free src/$d:"; echo "$hits"; fail=1
  fi
done
for d in core io arch data tokenize pack ckpt plan; do
  [[ -d $src/$d ]] || continue
  if hits=$(grep -rnE '#include *[<"]mpi\.h[>"]' "$src/$d"); then
    echo "MPI included in MPI-free src/$d:"; echo "$hits"; fail=1
  fi
done
# Arrow and parquet headers belong to the parquet reader alone (the pyarrow wheel's libraries stay behind it).
if hits=$(grep -rnE '#include *<(arrow|parquet)/' "$src" | grep -v "^$src/pack/readers/parquet.cpp:"); then
  echo "Arrow/parquet included outside src/pack/readers/parquet.cpp:"; echo "$hits"; fail=1
fi
for bin in "$@"; do
  if ldd "$bin" | grep -qE 'libtorch|libc10'; then echo "$bin links LibTorch:"; ldd "$bin" | grep -E 'torch|c10'; fail=1; fi
  if ldd "$bin" | grep -qE 'libmpi'; then echo "$bin links MPI"; fail=1; fi
done
[[ $fail == 0 ]] && echo "layers OK: ${#allowed[@]} folders, $# binaries checked"
exit $fail
