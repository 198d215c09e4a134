#!/usr/bin/env bash
# Fails when a server binary carries the test seams (decision 0042): the name of any hook
# point of `src/server/hooks.rs`, or the injected-failure message. Binaries built without the
# `test-hooks` feature (`scripts/build.sh`, `cargo install`) must carry none of them.
#
#   scripts/no_test_seams.sh <binary>
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
binary=${1:?usage: scripts/no_test_seams.sh <binary>}
[ -f "$binary" ] || die "no binary at $binary"
# The points' names, as `Point::name` spells them: `Point::X => "name",`.
mapfile -t names < <(grep -oE '=> "[a-z]+(-[a-z]+)+",' "$ROOT/src/server/hooks.rs" | cut -d'"' -f2)
# Hyphenated names only (a one-word name such as "owe" is in any binary); there are many.
[ "${#names[@]}" -ge 10 ] || die "found only ${#names[@]} hook point names in src/server/hooks.rs"
found=()
for name in "${names[@]}" "injected failure at"; do
  if grep -aqF -- "$name" "$binary"; then
    found+=("$name")
  fi
done
if [ "${#found[@]}" -gt 0 ]; then
  die "$binary carries test seams: ${found[*]}"
fi
log "$binary carries no test seams (${#names[@]} hook point names looked for)"
