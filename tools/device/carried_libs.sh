# shellcheck shell=bash
# Sourced by stage.sh, rehearse.sh and gpu_checks.sh: which shared libraries the GPU machine gets from the bundle,
# and which it takes from its torch wheel.
# carried_libs FILE...: "NAME PATH" for each library the executables FILE... load from this machine, less the C
# runtime, the CUDA driver, CUDA's runtime and torch's wheel (the GPU machine has its own of each).
carried_libs() { ldd "$@" 2>/dev/null | carried_of_ldd; }
carried_of_ldd() {   # the same, from ldd's output on stdin
  local runtime='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libresolv'
  runtime+='|libstdc\+\+|libgcc_s|libcuda\.so|libcudart\.so)'   # CUDA's runtime: the torch wheel's (nvidia/cu13)
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
    [[ $name =~ $runtime ]] && continue
    [[ $path == */site-packages/torch/* || $path == */site-packages/nvidia/* ]] && continue
    echo "$name $path"
  done
}
# wheel_libs PYTHON: "TORCH_LIB:NVIDIA_LIB…", the folders of PYTHON's torch wheel and of its nvidia-* wheels (NCCL,
# cuDNN…), which the bundle's binaries find through LD_LIBRARY_PATH (their RUNPATH names the bundle's folder alone)
wheel_libs() {
  local torch_lib site
  torch_lib=$("$1" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') || return 1
  site=$(dirname "$(dirname "$torch_lib")")
  echo "$torch_lib$(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | sed 's/^/:/' | tr -d '\n')"
}
