#!/usr/bin/env bash
# Installs Debian's Keystone + Neutron + Octavia + MariaDB (OpenStack Zed on Debian 12) when they are
# missing; the tests start them on loopback themselves (test/openstack/real-openstack.ts).
# Needs root (CI runs as root). Starts no service: policy-rc.d refuses MariaDB's own start.
set -euo pipefail
PKGS=(python3-keystone python3-neutron python3-octavia python3-pymysql uwsgi uwsgi-plugin-python3 mariadb-server mariadb-client)
if [[ -x /usr/bin/keystone-manage && -x /usr/bin/uwsgi && -x /usr/sbin/mariadbd ]] &&
  /usr/bin/python3 -c 'import neutron, keystone, octavia.api.app, octavia_lib, pymysql' 2>/dev/null; then
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
apt-get install -y -q --no-install-recommends "${PKGS[@]}"
echo "OpenStack packages installed in $(( $(date +%s) - started ))s"
