# Which packages to stage, from `apt-cache dumpavail` (every package's candidate version): the dependency
# closure of WANT (Depends and Pre-Depends; Recommends and Suggests left out) minus what the node has.
# The node has: the closure of the minimal system (Priority required, Essential: yes, apt) and of
# NODE_HAS (its compiler, its Python); packages of Priority important (a full install has them, a
# container image may not, so not their closures); and NEVER. Like apt, a dependency already satisfied
# adds nothing, otherwise its first alternative is taken, or for a virtual package its first provider.
# Versioned constraints are not checked: the candidates of one release satisfy one another.
#   apt-cache dumpavail | awk -v want="a b" -v node_has="c d" -v never="e f" -f resolve.awk
# Prints "package<TAB>version<TAB>architecture" per package to stage, then "#summary<TAB>staged<TAB>left".

/^Package: / { pkg = $2; next }
/^Version: / { version[pkg] = $2; next }
/^Architecture: / { arch[pkg] = $2; next }
/^Priority: (required|important)$/ { base[pkg] = 1; if ($2 == "required") minimal[pkg] = 1; next }
/^Essential: yes$/ { base[pkg] = 1; minimal[pkg] = 1; next }
/^(Pre-)?Depends: / { sub(/^[^:]*: /, ""); depends[pkg] = depends[pkg] (depends[pkg] == "" ? "" : ", ") $0; next }
/^Provides: / {
  sub(/^Provides: /, ""); n = split($0, names, /, */)
  for (i = 1; i <= n; i++) { name = bare(names[i]); providers[name] = providers[name] " " pkg }
  next
}

# "libfoo:any (>= 1.2)" -> "libfoo"
function bare(dep) { sub(/^[ \t]+/, "", dep); sub(/[ \t(].*$/, "", dep); sub(/:.*$/, "", dep); return dep }

function has(p) { return (p in taken) || (stage_mode && (p in excluded || p in base)) }

# Whether name (a package or a virtual one) is there already: itself or one of its providers.
function satisfied(name,   n, i, list) {
  if (has(name)) return 1
  n = split(providers[name], list, " ")
  for (i = 1; i <= n; i++) if (has(list[i])) return 1
  return 0
}

# The package that satisfies an unsatisfied dependency: its first real alternative, else the first
# provider of one of its virtual alternatives; "" when none exists.
function choose(alts, n,   i, list) {
  for (i = 1; i <= n; i++) if (alts[i] in version) return alts[i]
  for (i = 1; i <= n; i++) if (split(providers[alts[i]], list, " ") > 0) return list[1]
  return ""
}

# Breadth-first closure of the space-separated roots into taken[].
function closure(roots,   queue, head, tail, n, i, j, groups, ng, alts, na, ok, p, q) {
  delete taken; head = 1; tail = 0
  n = split(roots, list0, " ")
  for (i = 1; i <= n; i++) if (!has(list0[i])) { taken[list0[i]] = 1; queue[++tail] = list0[i] }
  while (head <= tail) {
    p = queue[head++]
    if (!(p in version)) { missing[p] = 1; continue }
    ng = split(depends[p], groups, /, */)
    for (i = 1; i <= ng; i++) {
      na = split(groups[i], alts, /[ \t]*\|[ \t]*/)
      ok = 0
      for (j = 1; j <= na; j++) { alts[j] = bare(alts[j]); if (satisfied(alts[j])) ok = 1 }
      if (ok) continue
      q = choose(alts, na)
      if (q == "") { missing[groups[i] " (for " p ")"] = 1; continue }
      taken[q] = 1; queue[++tail] = q
    }
  }
}

END {
  roots = "apt " node_has
  for (p in minimal) roots = roots " " p
  stage_mode = 0; closure(roots)
  for (p in taken) excluded[p] = 1
  n = split(never, list0, " "); for (i = 1; i <= n; i++) excluded[list0[i]] = 1
  delete missing
  stage_mode = 1; closure(want)
  bad = ""; for (m in missing) bad = bad "\n  " m
  if (bad != "") { print "resolve.awk: no installable package for:" bad > "/dev/stderr"; exit 1 }
  count = 0; for (p in taken) { print p "\t" version[p] "\t" arch[p]; count++ }
  nex = 0; for (p in excluded) nex++
  printf "#summary\t%d\t%d\n", count, nex
}
