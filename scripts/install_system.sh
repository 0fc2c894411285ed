#!/usr/bin/env bash
# The system tools the tests drive for real; `make test` runs this first:
#   chromium + chromium-driver   headless browser for tests/test_browser.py (the same Debian source
#                                package, so their versions match)
#   bubblewrap                   the autograder's sandbox (tests/test_sandbox.py, tests/test_autograder.py)
# On Debian as root it installs what is missing from the distribution; elsewhere it says what to
# install.  Nothing is downloaded at test time beyond this package installation.
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1; }
missing=()
if ! { have chromedriver && { have chromium || have chromium-browser; }; }; then
  missing+=(chromium chromium-driver)
fi
have bwrap || missing+=(bubblewrap)
have npm || missing+=(nodejs npm)        # JupyterHub's proxy (scripts/setup.sh installs it from npm)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && have apt-get; then
  echo "install_system: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # An air-gapped node (no package mirror) cannot install: say so and go on, the tests that need the
  # missing tools say what they miss.
  if ! { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
    echo "install_system: could not install ${missing[*]} (no package mirror reachable?); install them" \
         "by hand. The browser tests fail without chromium; the autograder refuses to grade without" \
         "bubblewrap (autograder doctor says what else is missing)" >&2
  fi
else
  echo "install_system: missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]})." \
       "The browser tests fail without chromium (or set CHROME_BIN and CHROMEDRIVER); the" \
       "autograder refuses to grade without bubblewrap (unless told --no-sandbox)" >&2
fi
