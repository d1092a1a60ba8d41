#!/usr/bin/env bash
# Gives the monitoring suite a real Prometheus, promtool and Pushgateway: Debian's packages
# (prometheus 2.42 with promtool, prometheus-pushgateway 1.5), linked into one directory.
# Built from the Go module proxy instead, Prometheus alone took about 10 minutes of both cores,
# most of a cold CI run's margin; Debian's binaries are the same programs, already built.
# The packages' services are not started (none is needed: the suite starts its own, on
# 127.0.0.1, and stops them).
# Usage: test/monitoring/build.sh        (prints the bin directory on its last line)
# Env:   TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
BIN=$CACHE/prom/debian
if ! [[ -x /usr/bin/prometheus && -x /usr/bin/promtool && -x /usr/bin/prometheus-pushgateway ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "run as root, or: apt-get install prometheus prometheus-pushgateway" >&2
    exit 1
  fi
  echo "apt-get install prometheus prometheus-pushgateway"
  apt-get update -qq >/dev/null
  # no service is wanted: policy-rc.d refuses every start for the length of the install
  policy=/usr/sbin/policy-rc.d
  had_policy=0
  [[ -e $policy ]] && had_policy=1
  [[ $had_policy -eq 1 ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"; }
  rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-pushgateway >/dev/null || rc=$?
  [[ $had_policy -eq 1 ]] || rm -f "$policy"
  [[ $rc -eq 0 ]] || exit "$rc"
fi
mkdir -p "$BIN"
ln -sfn /usr/bin/prometheus "$BIN/prometheus"
ln -sfn /usr/bin/promtool "$BIN/promtool"
ln -sfn /usr/bin/prometheus-pushgateway "$BIN/pushgateway"
"$BIN/prometheus" --version 2>&1 | head -n 1
"$BIN/pushgateway" --version 2>&1 | head -n 1
echo "$BIN"
