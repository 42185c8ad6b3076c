#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Runs commands side by side, each a lane with its output in DIR/NAME.log, and prints each lane's
# output whole once it ends, with its time, so that lanes never interleave their lines. Fails when
# any lane failed, after every lane has ended. make test runs its test suites this way: they
# mostly wait on API servers, kubelets and controllers, so lanes keep the two cores busy.
#
# Usage: lanes.sh DIR NAME COMMAND [NAME COMMAND...]; each COMMAND runs with bash -c.
set -uo pipefail
dir=${1:?usage: lanes.sh DIR NAME COMMAND [NAME COMMAND...]}
shift
(($# > 0 && $# % 2 == 0)) || { echo "lanes.sh: give each lane a NAME and a COMMAND" >&2; exit 2; }
mkdir -p "$dir"

declare -A names starts
while (($#)); do
	name=$1 command=$2
	shift 2
	bash -c "$command" >"$dir/$name.log" 2>&1 &
	names[$!]=$name
	starts[$!]=$SECONDS
	echo "lane $name: $command"
done

failed=()
while ((${#names[@]})); do
	wait -n -p pid
	status=$?
	name=${names[$pid]}
	cat "$dir/$name.log"
	took=$((SECONDS - starts[$pid]))
	if ((status == 0)); then
		echo "lane $name: ok in $took s"
	else
		echo "lane $name: FAIL (status $status) in $took s"
		failed+=("$name")
	fi
	echo "lane $name took ${took}s" >>"$dir/$name.log"
	unset "names[$pid]"
done
((${#failed[@]} == 0)) || { echo "lanes.sh: failed: ${failed[*]}" >&2; exit 1; }
