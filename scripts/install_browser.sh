#!/usr/bin/env bash
# The browser tests (tests/test_browser.py) drive headless Chromium through chromedriver.
# `make test` runs this first: on Debian as root it installs both from the distribution
# (the same source package, so their versions match); elsewhere it says what to install.
# Nothing is downloaded at test time beyond this package installation.
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1; }
if have chromedriver && { have chromium || have chromium-browser; }; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && have apt-get; then
  echo "install_browser: installing chromium and chromium-driver (for tests/test_browser.py)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
else
  echo "install_browser: chromium and chromedriver are missing; install them (Debian:" \
       "apt-get install chromium chromium-driver) or set CHROME_BIN and CHROMEDRIVER;" \
       "the browser tests fail without them" >&2
fi
