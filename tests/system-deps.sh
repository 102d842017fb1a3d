#!/bin/sh
# The Debian packages whose programs the tests run (part of the README's test command and of .ci/run):
# installs the missing ones with apt-get; when all are there it only looks for their commands.
# POSIX sh, idempotent; as root, or through sudo.
set -eu

# "package:command" pairs, space-separated: the package is installed if one of its commands (or, for a
# pair whose second part starts with /, that file) is missing.
#   prometheus: prometheus, promtool (tests/e2e/test_monitoring.py)
#   chromium and a font for its text (tests/e2e/test_view.py, driven by Playwright with /usr/bin/chromium)
#   iproute2 (ip) and util-linux (unshare, nsenter): the private network namespaces of
#   tests/e2e/test_network_exposure.py
PACKAGES="prometheus:prometheus prometheus:promtool chromium:chromium \
fonts-dejavu-core:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf iproute2:ip util-linux:unshare util-linux:nsenter"

say() { printf 'system-deps: %s\n' "$*"; }

missing=""
for pair in $PACKAGES; do
    package=${pair%%:*}
    command=${pair#*:}
    case "$command" in
        /*) [ -e "$command" ] && continue ;;
        *) command -v "$command" >/dev/null 2>&1 && continue ;;
    esac
    case " $missing " in *" $package "*) ;; *) missing="$missing $package" ;; esac
done
missing=${missing# }
if [ -z "$missing" ]; then
    say "all present ($PACKAGES)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    say "cannot install $missing: no apt-get here; the tests that need it will skip"
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    say "cannot install $missing: not root and no sudo; the tests that need it will skip"
    exit 0
fi

# Packages with a daemon (prometheus listens on :9090) would start it on installation: deny that with a
# policy-rc.d for the duration of the install (a policy already in place is left alone).
policy=/usr/sbin/policy-rc.d
own_policy=""
if [ ! -e "$policy" ]; then
    say "denying service starts during the install ($policy)"
    printf '#!/bin/sh\nexit 101\n' | $as_root tee "$policy" >/dev/null
    $as_root chmod 755 "$policy"
    own_policy=1
fi
cleanup() {
    if [ -n "$own_policy" ]; then
        $as_root rm -f "$policy"
    fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

install() {
    say "${as_root:+$as_root }apt-get install -y --no-install-recommends $missing"
    # shellcheck disable=SC2086
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends $missing
}
if ! install; then
    say "install failed; updating the package lists and trying again"
    $as_root apt-get update -q
    install
fi

say "installed $missing"
