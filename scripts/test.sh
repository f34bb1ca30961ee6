#!/usr/bin/env bash
# The two go test runs of `task test`, which passes:
#   scripts/test.sh PROGRESS E2E_TESTS RACE_PACKAGE...
# PROGRESS is scripts/testprogress built, E2E_TESTS the long tests' names
# as an alternation (task e2e runs them; here they are skipped).
#
# 1. Every package but the concurrent ones, one package at a time (-p 1:
#    several integration packages share the NATS and Postgres, and on 2
#    cores parallel packages starve each other's timing-sensitive outage
#    tests); -count=1, since integration tests depend on live servers,
#    never on the test cache.
# 2. The concurrent packages, once, under -race (running them twice cost
#    about 2 minutes; their TestMain also fails on a leaked goroutine).
#
# Ahead of both, in the background at the lowest CPU priority, the same
# test binaries are compiled and linked but not run (-exec true). -p 1
# compiles one package at a time and then runs its tests, most of which
# wait on the clock with the second core idle; on a cold build cache
# (a new machine, or a change to a package every other imports) the
# compiling was about a third of the run. The runs then find each package
# in the build cache. On a warm cache this only links, on the idle core.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

progress=$1 e2e=$2
shift 2
race=$(go list "$@")
rest=$(go list ./... | grep -vxF "$race")

# The compiling ahead runs in a process group of its own, ended with the
# script whatever way it ends.
setsid bash -c "nice -n 19 go test -count=1 -exec true $(echo $rest) && nice -n 19 go test -race -count=1 -exec true $(echo $race)" >/dev/null 2>&1 &
ahead=$!
trap 'kill -- -$ahead 2>/dev/null || true' EXIT

# shellcheck disable=SC2086 # package lists split on white space
go test -json -count=1 -p 1 -timeout 40m -skip "^($e2e)\$" $rest 2>&1 | "$progress" -label "task test"
wait "$ahead" || true # a failure to compile shows in the runs themselves
# shellcheck disable=SC2086
go test -json -race -count=1 -p 1 -timeout 20m $race 2>&1 | "$progress" -label "task test -race"
