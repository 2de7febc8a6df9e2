# Sourced by stage.sh and rehearse.sh: which shared libraries the GPU machine gets from the bundle.
# carried_libs FILE...: "NAME PATH" for each library the executables FILE... load from this machine, less the C
# runtime, the CUDA driver and torch's wheel (the GPU machine has its own of each).
carried_libs() {
  local runtime='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libutil\.so|libresolv'
  runtime+='|libstdc\+\+|libgcc_s|libcuda\.so)'
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
    [[ $name =~ $runtime ]] && continue
    [[ $path == */site-packages/torch/* || $path == */site-packages/nvidia/* ]] && continue
    echo "$name $path"
  done
}
