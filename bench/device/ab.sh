#!/usr/bin/env bash
# A/B in one call of the device tool, in the order B, A, B: the tree as sent, then the tree with some
# of its files as they were at another revision (A), then the tree again, each half a round of
# bench/device/round.sh into its own folder. The first round of a call has run ~1% slower than the
# later ones (round.sh's header), so a change is judged by A against the mean of the two B halves,
# or kernel by kernel against the kernels it does not touch.
#
#   here:    bash bench/device/ab.sh pack <rev> <path>...   # .ab/: those paths as they were at <rev>
#   device:  run(command="GIT_SHA=<sha> TRACE_SELS=cupy_raw TRACE_BS=64 bash bench/device/ab.sh run trace:40 train:50",
#                carry=[".ab"])
#
# The stage environment (TRACE_*, TRAIN_*, ...) is round.sh's and goes to all three halves; a path that
# did not exist at <rev> is left out of A (pack says so). Comes back as $OUT/{b1,a,b2}.tar.gz, each a
# round.sh folder (its round.txt and its stages' tarballs), and $OUT/ab.txt (the halves, their
# revisions, the files A changes). AB_ROUND names the round driver (default bench/device/round.sh).
set -uo pipefail

pack() {
  local rev=$1; shift
  [[ $# -gt 0 ]] || { echo "ab.sh pack: name the paths to take from $rev" >&2; return 2; }
  local sha; sha=$(git rev-parse --short "$rev^{commit}") || { echo "ab.sh pack: no revision $rev" >&2; return 2; }
  local have=()
  for path in "$@"; do
    if git cat-file -e "$sha:$path" 2>/dev/null; then have+=("$path"); else echo "ab.sh pack: $path is not in $sha: left out" >&2; fi
  done
  [[ ${#have[@]} -gt 0 ]] || { echo "ab.sh pack: none of the paths is in $sha" >&2; return 2; }
  rm -rf .ab && mkdir -p .ab
  git archive --format=tar -o .ab/a.tar "$sha" -- "${have[@]}" && echo "$sha" > .ab/rev
  echo "ab.sh: .ab/a.tar holds, as of $sha:"; tar tf .ab/a.tar | grep -v '/$' | sed 's/^/  /'
}

run() {
  [[ $# -gt 0 ]] || { echo "ab.sh run: name round.sh's stages (stage:cap ...)" >&2; return 2; }
  [[ -f .ab/a.tar && -f .ab/rev ]] || {
    echo "ab.sh run: no .ab/a.tar: run 'bash bench/device/ab.sh pack <rev> <path>...' first and carry .ab" >&2; return 2; }
  : "${OUT:?ab.sh run: OUT must name the folder the halves go to}"
  mkdir -p "$OUT"
  local round=${AB_ROUND:-bench/device/round.sh} rev b_sha=${GIT_SHA:-tree} keep files
  rev=$(cat .ab/rev)
  keep=$(mktemp -d)
  mapfile -t files < <(tar tf .ab/a.tar | grep -v '/$')
  for f in "${files[@]}"; do  # the tree's own copies of A's files, to put back after A
    [[ -e $f ]] && mkdir -p "$keep/$(dirname "$f")" && cp -p "$f" "$keep/$f"
  done
  { echo "halves: b1 (the tree, $b_sha), a ($rev's ${#files[@]} file(s) over the tree), b2 (the tree again)"
    printf '  %s\n' "${files[@]}"; } | tee "$OUT/ab.txt"
  half() {  # (the halves after the first reuse its editable install: round.sh's NO_INSTALL)
    mkdir -p "$OUT/$1"
    OUT=$OUT/$1 GIT_SHA=$2 NO_INSTALL=$([[ $1 == b1 ]] || echo 1) bash "$round" "${@:3}"
    tar czf "$OUT/$1.tar.gz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"
  }
  half b1 "$b_sha" "$@"
  tar xf .ab/a.tar
  half a "$rev" "$@"
  for f in "${files[@]}"; do  # the tree back: its own copies, and nothing A brought that it lacks
    if [[ -e $keep/$f ]]; then cp -p "$keep/$f" "$f"; else rm -f "$f"; fi
  done
  half b2 "$b_sha" "$@"
  rm -rf "$keep"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: bash bench/device/ab.sh pack <rev> <path>... | run <stage:cap>..." >&2; exit 2 ;;
esac
