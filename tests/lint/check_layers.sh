#!/usr/bin/env bash
# The torch-free layers stay torch-free (docs/architecture.md): no LibTorch include under core/io/dist/
# pack/ckpt, no MPI include under core/io/pack/ckpt, and the torch-free binaries do not load libtorch.
# usage: check_layers.sh SRC_DIR BINARY...
set -u
src=$1; shift
fail=0
for d in core io dist pack ckpt; do
  [[ -d $src/$d ]] || continue
  if hits=$(grep -rnE '#include *[<"](torch|ATen|c10)/' "$src/$d"); then
    echo "LibTorch included in torch-free src/$d:"; echo "$hits"; fail=1
  fi
done
for d in core io pack ckpt; do
  [[ -d $src/$d ]] || continue
  if hits=$(grep -rnE '#include *[<"]mpi\.h[>"]' "$src/$d"); then
    echo "MPI included in MPI-free src/$d:"; echo "$hits"; fail=1
  fi
done
for bin in "$@"; do
  if ldd "$bin" | grep -qE 'libtorch|libc10'; then echo "$bin links LibTorch:"; ldd "$bin" | grep -E 'torch|c10'; fail=1; fi
  if ldd "$bin" | grep -qE 'libmpi'; then echo "$bin links MPI"; fail=1; fi
done
[[ $fail == 0 ]] && echo "layers OK: $# binaries checked"
exit $fail
