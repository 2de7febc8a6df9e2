# shellcheck shell=bash
# Source with bash (`source DIR/env.sh`) to use the dependencies staged in this folder by
# tools/offline/stage.sh: compilers, pkg-config, Meson and the dynamic loader then find them ahead of the
# system's. The folder may be copied or moved anywhere: every path is computed from where this file is,
# and pkg-config files are rewritten to that place the first time it is sourced there.
#   ULYSSES_STAGE_ONLY=1   pkg-config sees only the stage's .pc files (the system's are hidden)
# Also needed at run time by what was built against the stage (the staged libraries' own dependencies
# are found through LD_LIBRARY_PATH): source it in the job, or before sbatch (which passes the environment on).

# Puts DIRS... at the front of the colon-separated variable VAR, once each (the last one first).
_ulysses_prepend() {
  local var=$1 dir value; shift
  value=${!var:-}
  for dir in "$@"; do
    [[ -d $dir ]] || continue
    case ":$value:" in *":$dir:"*) ;; *) value=$dir${value:+:$value} ;; esac
  done
  export "$var=$value"
}

# The pkg-config files name the prefix by the path recorded in prefix/.location (a placeholder right
# after staging): when the folder is elsewhere now, replace it in every .pc file.
_ulysses_relocate() {
  local prefix=$1 old pc text
  old=$(<"$prefix/.location")
  [[ $old == "$prefix" ]] && return 0
  if [[ ! -w $prefix ]]; then
    echo "env.sh: error: $prefix was staged for ${old%/prefix} and is read-only here: copy the stage" >&2
    return 1
  fi
  while IFS= read -r -d '' pc; do
    text=$(<"$pc")
    printf '%s\n' "${text//"$old"/"$prefix"}" > "$pc.$$" && mv -f "$pc.$$" "$pc" || return 1
  done < <(find "$prefix" -name '*.pc' -type f -print0)
  printf '%s\n' "$prefix" > "$prefix/.location"
}

_ulysses_stage_env() {
  # stage.info's variables stay local: sourcing env.sh leaves only the exports behind.
  # shellcheck disable=SC2034
  local stage prefix lib pc STAGE_TRIPLET='' STAGE_RELEASE='' STAGE_ARCH='' STAGE_PACKAGES=''
  stage=$(cd -P "$(dirname "${BASH_SOURCE[0]}")" && pwd) || return 1
  prefix=$stage/prefix
  if [[ ! -f $stage/stage.info || ! -f $prefix/.location ]]; then
    echo "env.sh: error: $stage is not a complete stage (run tools/offline/stage.sh $stage)" >&2
    return 1
  fi
  # shellcheck disable=SC1091
  . "$stage/stage.info"
  _ulysses_relocate "$prefix" || return 1
  lib=$prefix/usr/lib/$STAGE_TRIPLET
  pc=$lib/pkgconfig:$prefix/usr/lib/pkgconfig:$prefix/usr/share/pkgconfig
  export ULYSSES_STAGE=$stage
  _ulysses_prepend PATH "$prefix/usr/bin"
  # Headers as system headers (like /usr/include), so -Werror builds do not fail on warnings inside
  # third-party headers: C_INCLUDE_PATH/CPLUS_INCLUDE_PATH act as -isystem, CPATH as -I.
  _ulysses_prepend C_INCLUDE_PATH "$prefix/usr/include" "$prefix/usr/include/$STAGE_TRIPLET"
  _ulysses_prepend CPLUS_INCLUDE_PATH "$prefix/usr/include" "$prefix/usr/include/$STAGE_TRIPLET"
  _ulysses_prepend LIBRARY_PATH "$prefix/usr/lib" "$lib"
  _ulysses_prepend LD_LIBRARY_PATH "$prefix/usr/lib" "$lib"
  if [[ ${ULYSSES_STAGE_ONLY:-0} == 1 ]]; then
    export PKG_CONFIG_LIBDIR=$pc PKG_CONFIG_PATH=$pc
  else
    _ulysses_prepend PKG_CONFIG_PATH "$prefix/usr/share/pkgconfig" "$prefix/usr/lib/pkgconfig" "$lib/pkgconfig"
  fi
}

# `return` (sourced) with the status, leaving no helper behind.
if _ulysses_stage_env; then
  unset -f _ulysses_prepend _ulysses_relocate _ulysses_stage_env
else
  unset -f _ulysses_prepend _ulysses_relocate _ulysses_stage_env
  # shellcheck disable=SC2317  # exit: only when run instead of sourced
  return 1 2>/dev/null || exit 1
fi
