#!/usr/bin/env bash
# Installs Debian's Keystone + Neutron + Octavia + Cinder + MariaDB (OpenStack Zed on Debian 12), and
# RabbitMQ for Cinder's RPC, when they are missing; the tests start them on loopback themselves
# (test/openstack/real-openstack.ts, real-cinder.ts). Needs root (CI runs as root). Starts no
# service: a policy-rc.d refuses every start for the length of the install (one already there
# is left as it is).
set -euo pipefail
PKGS=(python3-keystone python3-neutron python3-octavia python3-cinder python3-pymysql uwsgi uwsgi-plugin-python3
  mariadb-server mariadb-client rabbitmq-server)
if [[ -x /usr/bin/keystone-manage && -x /usr/bin/uwsgi && -x /usr/sbin/mariadbd && -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] &&
  /usr/bin/python3 -c 'import neutron, keystone, octavia.api.app, octavia_lib, pymysql' 2>/dev/null &&
  /usr/bin/python3 -c 'import cinder.cmd.api, cinder.tests.fake_driver' 2>/dev/null; then
  echo "OpenStack packages already installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "OpenStack packages are missing and this is not root: run as root: apt-get install ${PKGS[*]}" >&2
  exit 1
fi
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
policy=/usr/sbin/policy-rc.d
had_policy=0
[[ -e $policy ]] && had_policy=1
[[ $had_policy -eq 1 ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"; }
rc=0
apt-get install -y -q --no-install-recommends "${PKGS[@]}" || rc=$?
[[ $had_policy -eq 1 ]] || rm -f "$policy"
[[ $rc -eq 0 ]] || exit "$rc"
echo "OpenStack packages installed in $(( $(date +%s) - started ))s"
