#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Scans for known vulnerabilities the code reaches, with the govulncheck pinned in this module's
# go.mod, against the Go vulnerability database of the golang.org/x/vulndb module pinned beside
# it: every Go module of the repository in source mode, then each binary given (the release's
# archives of the kubectl plugin are opened) in binary mode. It fails on any finding the code
# reaches, in a module or in the standard library; vulnerable code that is linked but never
# called is reported by govulncheck as informational and does not fail.
#
# Usage: scan.sh DBDIR [BINARY|ARCHIVE.tar.gz]... The database is built into DBDIR once per
# vulndb version (2-3 minutes), from the module's OSV files, with the module's own indexer.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
db=${1:?usage: scan.sh DBDIR [BINARY|ARCHIVE.tar.gz]...}
shift

if [[ ! -f $db/index/modules.json ]]; then
  src=$(go -C "$here" mod download -json golang.org/x/vulndb | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/vulndb.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "building the vulnerability database from $src into $db (once per vulndb version)" >&2
  go -C "$here" tool indexdb -vulns "$src/data/osv" -out "$tmp/db"
  # indexdb leaves the database's time unset; the pinned commit's time says how fresh it is.
  modified=$(go -C "$here" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' golang.org/x/vulndb)
  printf '{"modified":"%s"}' "$modified" >"$tmp/db/index/db.json"
  gzip -nc "$tmp/db/index/db.json" >"$tmp/db/index/db.json.gz"
  mkdir -p "$(dirname "$db")"
  rm -rf "$db" && mv "$tmp/db" "$db"
fi

govulncheck() { go -C "$here" tool govulncheck -db "file://$db" "$@"; }

# Every module; those that hold no package of their own (tools modules that pin a command for the
# tests, such as hack/envtest's Kubernetes releases) have nothing to scan.
status=0
while read -r mod; do
  dir=$(dirname "$mod")
  name=${dir#"$root"}; name=${name#/}; name=${name:-.}
  if [[ -z $(go -C "$dir" list ./... 2>/dev/null) ]]; then
    echo "== $name: no packages of its own (a tools module), nothing to scan"
    continue
  fi
  echo "== $name (source)"
  govulncheck -C "$dir" ./... || status=1
done < <(find "$root" -name go.mod -not -path "$root/bin/*" -not -path "$root/dist/*" | sort)

for bin in "$@"; do
  bin=$(realpath "$bin") # govulncheck runs from this module's directory
  if [[ $bin == *.tar.gz ]]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/vulnbin.XXXXXX")
    tar -xzf "$bin" -C "$out"
    target=$(find "$out" -type f | head -1)
  else
    target=$bin
  fi
  echo "== $(basename "$bin") (binary)"
  govulncheck -mode=binary "$target" || status=1
done
exit $status
