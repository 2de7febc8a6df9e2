#!/usr/bin/env bash
# Stages, for an air-gapped cluster node, the Debian packages the toolkit's build and tests need that such
# a node lacks (MPICH with mpiexec, HDF5 serial, CLI11, fmt, nlohmann-json, xxhash, zstd, zlib, GoogleTest,
# protobuf with protoc and ISA-L for the trainer's TensorBoard files, pkg-config), with their dependencies, into one folder that can be copied to the node at any path.
#
#   tools/offline/stage.sh DIR
#
# Run it on a machine WITH internet and the SAME distribution release as the nodes (here Debian 12
# bookworm, amd64): the packages are that release's, linked against its glibc. No root needed: it only
# downloads (apt-get download) and unpacks (dpkg-deb -x), never installs. Then, on the node:
#   tools/offline/build.sh DIR [meson options...]
#
# What DIR holds afterwards:
#   debs/        the downloaded .deb files (the record of what was staged; licenses are in prefix/usr/share/doc)
#   prefix/usr/  every package unpacked; pkg-config files point into it; alternatives links made
#   env.sh       `source DIR/env.sh` (bash) exports PATH, include/library/loader paths, PKG_CONFIG_PATH
#   stage.info   what was staged, for which release and architecture
#
# Left out on purpose: what the node already has and must never be shadowed: glibc, libstdc++, libgcc,
# packages of Priority required/important or Essential, and everything the node's compiler
# (build-essential) and Python (python3, which runs Meson) depend on. A second run downloads and unpacks
# only what changed (seconds). Environment:
#   STAGE_APT_UPDATE=1     read fresh package lists into DIR/apt/ instead of the system's (also what happens
#                          when the system has none, as in slim containers); needs no root
#   ULYSSES_NODE_HAS="…"   packages whose dependency closure the node is known to have
#                          (default: build-essential python3)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# tools/bootstrap.sh's list minus the compiler, Meson/ninja, ccache, Slurm/munge and the Python venv.
WANTED=(
  mpich libmpich-dev
  libhdf5-dev hdf5-tools
  libcli11-dev libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libzstd-dev zlib1g-dev libxxhash-dev
  libprotobuf-dev protobuf-compiler libisal-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev
  pkg-config
)
# Base libraries that must never be shadowed on the node (their Priority field says "optional" in
# bookworm's indexes, so the priority rule alone would miss them).
NEVER=(libc6 libc6-dev libstdc++6 libgcc-s1 libc-bin linux-libc-dev)
# Fortran compilers: libmpich-dev asks for one for the mpif77/mpif90 wrappers; the toolkit is C++.
SKIP=(gfortran gfortran-12)
read -r -a NODE_HAS <<< "${ULYSSES_NODE_HAS:-build-essential python3}"

# Bump when the unpacked prefix's layout or fix-ups change, so a second run redoes them.
FORMAT=2

log() { echo "[stage] $*"; }
die() { echo "stage.sh: error: $*" >&2; exit 2; }
fail() { echo "stage.sh: FAILED: $*" >&2; exit 1; }

check_host() {
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    die "needs apt-get and dpkg-deb: run it on a Debian machine of the nodes' release"
  fi
  ARCH=$(dpkg --print-architecture)
  TRIPLET=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || true)
  [[ -n $TRIPLET ]] || case $ARCH in
    amd64) TRIPLET=x86_64-linux-gnu ;;
    arm64) TRIPLET=aarch64-linux-gnu ;;
    *) die "cannot tell the multiarch triplet of architecture $ARCH" ;;
  esac
  # shellcheck disable=SC1091
  RELEASE=$(. /etc/os-release && echo "${ID:-unknown} ${VERSION_ID:-} ${VERSION_CODENAME:-}")
}

# APT reads the system's package lists, or private ones under DIR/apt (no root: nothing system-wide is
# written) when asked or when the system has none.
setup_apt() {
  APT_OPTS=(); PRIVATE_LISTS=0
  # As root, apt hands downloads to the _apt user, which cannot write into DIR; keep them as root.
  if [[ $(id -u) == 0 ]]; then APT_OPTS+=(-o APT::Sandbox::User=root); fi
  if [[ ${STAGE_APT_UPDATE:-0} != 1 ]] && compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    return
  fi
  local lists=$STAGE/apt/lists
  PRIVATE_LISTS=1
  mkdir -p "$lists/partial" "$STAGE/apt/archives/partial"
  # The binary caches go to a scratch folder: rebuilt in a second, 70 MB not worth keeping.
  APT_OPTS+=(-o "Dir::State::Lists=$lists" -o "Dir::Cache::Archives=$STAGE/apt/archives"
             -o "Dir::Cache::pkgcache=$SCRATCH/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$SCRATCH/srcpkgcache.bin")
  # Fresh enough: a second run within a day reuses them.
  if [[ -z $(find "$lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 -print -quit) ]]; then
    log "reading package lists into $STAGE/apt (apt-get update, no root needed)"
    apt-get "${APT_OPTS[@]}" update -qq --error-on=any ||
      fail "apt-get update could not read the package lists from the mirror (/etc/apt/sources*)"
  fi
}

# The packages to stage, with the version and architecture apt would download: resolve.awk works out the
# dependency closure from the candidate records of every package (one apt-cache call).
declare -A VERSION=() PKG_ARCH=()
choose_packages() {
  local table pkg ver arch
  table=$(apt-cache "${APT_OPTS[@]}" dumpavail | awk -f "$HERE/resolve.awk" -v want="${WANTED[*]}" \
            -v node_has="${NODE_HAS[*]}" -v never="${NEVER[*]} ${SKIP[*]}" | sort) ||
    fail "could not work out the packages to stage from the package lists"
  PACKAGES=()
  while IFS=$'\t' read -r pkg ver arch; do
    if [[ $pkg == '#summary' ]]; then
      log "$ver packages to stage ($arch left to the node: its base system, compiler and Python)"
    else
      PACKAGES+=("$pkg"); VERSION[$pkg]=$ver; PKG_ARCH[$pkg]=$arch
    fi
  done <<< "$table"
}

deb_name() { local v=${VERSION[$1]}; echo "${1}_${v//:/%3a}_${PKG_ARCH[$1]}.deb"; }

# Downloads what DIR/debs lacks (into a scratch folder first, so an interrupted run leaves no partial
# .deb), and removes .debs no longer wanted (an older version after a point release). Returns 1 when
# apt-get download fails.
download() {
  local debs=$STAGE/debs tmp=$STAGE/debs.partial p missing=() f
  mkdir -p "$debs"
  DEBS=()
  for p in "${PACKAGES[@]}"; do
    f=$(deb_name "$p"); DEBS+=("$f")
    [[ -s $debs/$f ]] || missing+=("$p=${VERSION[$p]}")
  done
  if ((${#missing[@]})); then
    log "downloading ${#missing[@]} packages"
    rm -rf "$tmp" && mkdir -p "$tmp"
    # Its log is kept only when it fails (apt prints a line or more per package).
    if ! (cd "$tmp" && apt-get "${APT_OPTS[@]}" download -q "${missing[@]}") > "$STAGE/download.log" 2>&1; then
      grep '^E:' "$STAGE/download.log" | head -n 3 >&2
      log "apt-get download failed: its log is $STAGE/download.log"
      return 1
    fi
    mv "$tmp"/*.deb "$debs"/ && rm -rf "$tmp" "$STAGE/download.log"
  else
    log "all ${#PACKAGES[@]} packages already downloaded"
  fi
  local -A want=()
  for f in "${DEBS[@]}"; do want[$f]=1; [[ -s $debs/$f ]] || fail "apt-get download did not write $f"; done
  for f in "$debs"/*.deb; do [[ -n ${want[${f##*/}]:-} ]] || { log "removing stale ${f##*/}"; rm -f "$f"; }; done
}

# This machine's package lists may be too old for the mirror (a security update replaced a version):
# then read fresh ones privately and try once more.
fetch_packages() {
  setup_apt
  choose_packages
  download && return
  ((PRIVATE_LISTS)) && fail "apt-get download failed: is the Debian mirror reachable?"
  log "apt-get download failed with this machine's package lists; retrying with fresh ones"
  STAGE_APT_UPDATE=1 setup_apt
  choose_packages
  download || fail "apt-get download failed: is the Debian mirror reachable?"
}

# A relative symlink LINK -> TARGET, computed without following links (ln -r would follow them, out of
# the prefix into this machine's /usr when a link in the chain is absolute).
link_relative() {
  ln -sfn "$(realpath -ms --relative-to="$(dirname "$2")" "$1")" "$2"
}

# dpkg-deb -x does not run maintainer scripts: make the update-alternatives links they would make
# (mpiexec -> mpiexec.mpich, mpi.pc, hdf5.pc, ...) from the literal paths in each postinst.
make_alternatives() {
  local root=$1 deb link target
  for deb in "$STAGE"/debs/*.deb; do
    { dpkg-deb -I "$deb" postinst 2>/dev/null || true; } | sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' |
      awk '/update-alternatives/ {
        for (i = 1; i <= NF; i++)
          if (($i == "--install" || $i == "--slave") && $(i+1) ~ /^\/usr\// && $(i+3) ~ /^\/usr\//)
            print $(i+1), $(i+3)
      }'
  done | while read -r link target; do
    [[ -e $root$target && ! -e $root$link && ! -L $root$link ]] || continue
    mkdir -p "$(dirname "$root$link")" && link_relative "$root$target" "$root$link"
  done
}

# Absolute links into /usr become relative (the folder moves). Library links to files of packages left
# to the node (libz.so -> libz.so.1.2.13 from zlib1g) point at the node's own copy under /usr; other
# dangling links (a README in a doc folder) are left as they are.
fix_links() {
  local root=$1 link target sys
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    if [[ $target == /* ]]; then sys=$target; else sys=$(realpath -ms "$(dirname "${link#"$root"}")/$target"); fi
    if [[ -e $root$sys || -L $root$sys ]]; then
      if [[ $target == /* ]]; then link_relative "$root$sys" "$link"; fi
    elif [[ ${link#"$root"} == /usr/lib/* ]]; then
      ln -sfn "$sys" "$link"
      [[ -e $sys ]] || log "note: ${link#"$root"} -> $sys (a base package's file, not on this machine)"
    fi
  done < <(find "$root" -type l -print0)
}

# pkg-config files name /usr: point them at the prefix through a placeholder that env.sh replaces with
# the folder's current location (here, and again whenever the folder has moved).
rewrite_pc() {
  local root=$1
  find "$root" -name '*.pc' -type f -print0 | xargs -0 -r sed -E -i \
    's#(^|[^[:alnum:]._/-]|-[IL])/usr(/|$|[[:space:]])#\1@ULYSSES_STAGE_PREFIX@/usr\2#g'
  echo '@ULYSSES_STAGE_PREFIX@' > "$root/.location"
}

# Unpacks every .deb into a fresh prefix unless the one there was made from exactly these .debs.
unpack() {
  local prefix=$STAGE/prefix new=$STAGE/prefix.new stamp deb
  stamp=$(printf 'format %s\n' "$FORMAT"; printf '%s\n' "${DEBS[@]}" | sort)
  if [[ -f $prefix/.debs && $(<"$prefix/.debs") == "$stamp" ]]; then
    log "prefix up to date ($prefix)"; return
  fi
  log "unpacking ${#DEBS[@]} packages into $prefix"
  rm -rf "$new" && mkdir -p "$new"
  for deb in "${DEBS[@]}"; do dpkg-deb -x "$STAGE/debs/$deb" "$new"; done
  make_alternatives "$new"
  fix_links "$new"
  rewrite_pc "$new"
  printf '%s\n' "$stamp" > "$new/.debs"
  rm -rf "$prefix" && mv "$new" "$prefix"
}

write_env() {
  install -m 0644 "$HERE/env.sh" "$STAGE/env.sh"
  {
    echo "STAGE_RELEASE='$RELEASE'"
    echo "STAGE_ARCH=$ARCH"
    echo "STAGE_TRIPLET=$TRIPLET"
    echo "STAGE_PACKAGES='${PACKAGES[*]}'"
  } > "$STAGE/stage.info"
  # Points the pkg-config files at the prefix where it is now (and checks env.sh works).
  # shellcheck disable=SC1091
  (. "$STAGE/env.sh" >/dev/null) || fail "$STAGE/env.sh failed"
}

main() {
  (($# == 1)) || die "usage: tools/offline/stage.sh DIR"
  mkdir -p "$1"
  STAGE=$(cd -P "$1" && pwd)
  check_host
  log "staging for $RELEASE ($ARCH) into $STAGE"
  SCRATCH=$(mktemp -d)
  trap 'rm -rf "$SCRATCH"' EXIT
  fetch_packages
  unpack
  write_env
  log "done: $(du -sh "$STAGE/debs" | cut -f1) of .debs, prefix $(du -sh "$STAGE/prefix" | cut -f1);" \
      "copy $STAGE to the node and run tools/offline/build.sh DIR there"
}

main "$@"
