#!/usr/bin/env bash
# JupyterHub's proxy, configurable-http-proxy from npm, into .hub/ (autograder/hub.py looks there first):
# what the class on a hub needs (tests/test_hub.py, book/jupyterhub.md).  `make test` runs it after
# install_system.sh (which installs nodejs and npm on Debian as root).  Idempotent: returns at once when
# the proxy is there.  Without npm or a reachable registry it says so; the hub test then skips with why.
set -uo pipefail
cd "$(dirname "$0")/.."
VERSION=5.3.0
[ -x .hub/node_modules/.bin/configurable-http-proxy ] && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "hub_proxy: no npm here: install nodejs and npm to run the JupyterHub test" >&2
  exit 0
fi
echo "hub_proxy: installing configurable-http-proxy@$VERSION into .hub (npm)"
npm install --prefix .hub --no-audit --no-fund --loglevel=error "configurable-http-proxy@$VERSION" >/dev/null \
  || echo "hub_proxy: npm could not install configurable-http-proxy: the JupyterHub test will be skipped" >&2
exit 0
