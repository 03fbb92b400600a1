#!/usr/bin/env bash
# Measures how long an instance takes to exit when SIGTERM arrives while it
# is in a rebalance: instance A runs word count; instance B joins (both
# rebalance); after DELAY seconds (default 1.0) the instance named by VICTIM
# (a or b, default b) gets SIGTERM. Prints the time from the signal to its
# exit. Needs a broker (KAFKA_BOOTSTRAP_SERVERS, default 127.0.0.1:9092) and
# a built `weir` (WEIR, default $CARGO_TARGET_DIR/debug/weir).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
W="${WEIR:-$CARGO_TARGET_DIR/debug/weir}"
export WEIR_BOOTSTRAP_SERVERS="${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}"
id="sigterm-$(date +%s%N)"
dir="$(mktemp -d)"
trap 'kill -TERM "${A:-}" "${B:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$W" generate word-count --count 2000 --set "topology.input_topic=$id-in" --set "topology.output_topic=$id-out" 2>/dev/null
common=(--set "application_id=$id" --set processing_guarantee=exactly_once_v2
    --set "topology.input_topic=$id-in" --set "topology.output_topic=$id-out" --set http_bind=off)
"$W" run word-count "${common[@]}" --set "state_dir=$dir/a" 2>"$dir/a.log" &
A=$!
sleep 8
"$W" run word-count "${common[@]}" --set "state_dir=$dir/b" 2>"$dir/b.log" &
B=$!
sleep "${DELAY:-1.0}"
victim=$B
if [[ "${VICTIM:-b}" == a ]]; then victim=$A; fi
t0=$(date +%s.%N)
kill -TERM "$victim"
rc=0
wait "$victim" || rc=$?
t1=$(date +%s.%N)
echo "victim ${VICTIM:-b} (delay ${DELAY:-1.0} s) exited with $rc after $(python3 -c "print(f'{$t1 - $t0:.2f}')") s"
