#!/usr/bin/env bash
# Installs the Debian package on this machine, uses it, purges it, and checks that nothing
# is left behind. Root only (it runs dpkg); says so and passes otherwise. .ci/run calls it.
#
#   packaging/check-deb.sh          # builds it first (packaging/build-deb.sh)
#   packaging/check-deb.sh FILE.deb
#
# Needs lintian, man-db and systemd-analyze (systemd) for their checks; without
# systemd-analyze the unit check says it skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: packaging/check-deb.sh: not root, the package was not installed (run it as root)"
  exit 0
fi
if dpkg-query -W -f '${Status}' pinperf 2>/dev/null | grep -qv not-installed; then
  echo "check-deb: pinperf is already installed here; this check installs and purges it, so it stops" >&2
  exit 1
fi

deb=${1:-$(packaging/build-deb.sh)}
# Not man-db's default width, so neither `man pinperf` nor systemd-analyze's check of the
# units' Documentation=man:pinperf(1) saves a cat page in /var/cache/man (man-db's cache,
# expired by its daily job, that the purge would leave).
export MANWIDTH=72
step() { printf '\n$ %s\n' "$*"; }
fail() { echo "check-deb: FAILED: $*" >&2; exit 1; }

# What exists before: the package's paths, and anything named *pinperf* where dpkg,
# systemd and the package write (maintainer scripts, unit links, deb-systemd-helper's
# state, conffiles). After the purge both must be as they were.
mapfile -t paths < <(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|; s|/$||' | grep -v '^\.\?$')
exists() { for p in "${paths[@]}"; do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done; }
named() { find /etc /lib/ /usr /var/lib /opt -path "$root" -prune -o -name '*pinperf*' -print 2>/dev/null | LC_ALL=C sort; }
before_paths=$(exists)
before_named=$(named)

step dpkg-deb -c "$deb"
dpkg-deb -c "$deb"
step dpkg-deb -f "$deb" Package Version Depends Suggests Installed-Size
dpkg-deb -f "$deb" Package Version Depends Suggests Installed-Size

if command -v lintian >/dev/null; then
  step lintian --fail-on error,warning "$deb"
  lintian --allow-root --fail-on error,warning "$deb" || fail "lintian"
  echo "(lintian: no tags)"
else
  echo "note: lintian is missing (apt-get install lintian); not checked" >&2
fi

# A host whose dpkg excludes man pages or docs (a slim image) would install neither.
include=()
if grep -qs '^path-exclude' /etc/dpkg/dpkg.cfg.d/*; then include=(--path-include='/*'); fi
step dpkg -i "${include[@]}" "$deb"
dpkg -i "${include[@]}" "$deb"

step pinperf --version
[ "$(command -v pinperf)" = /usr/bin/pinperf ] || fail "pinperf on PATH is $(command -v pinperf), not /usr/bin/pinperf"
/usr/bin/pinperf --version

step man -w pinperf
command -v man >/dev/null || fail "man is missing (apt-get install man-db)"
[ "$(man -w pinperf)" = /usr/share/man/man1/pinperf.1.gz ] || fail "man -w pinperf: $(man -w pinperf 2>&1)"
man -w pinperf
man -P cat pinperf 2>/dev/null | head -4

step completions
for c in /usr/share/bash-completion/completions/pinperf /usr/share/zsh/vendor-completions/_pinperf \
  /usr/share/fish/vendor_completions.d/pinperf.fish; do
  [ -s "$c" ] || fail "no completion file $c"
  echo "$c: $(wc -l <"$c") lines"
done
bash -c 'source /usr/share/bash-completion/completions/pinperf && complete -p pinperf'

step systemd-analyze verify /lib/systemd/system/pinperf.service /lib/systemd/system/pinperf-mesh.service
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify /lib/systemd/system/pinperf.service /lib/systemd/system/pinperf-mesh.service 2>&1) ||
    fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify printed: $out"
  echo "(no complaints)"
else
  echo "SKIPPED: systemd-analyze verify: systemd-analyze is missing (apt-get install systemd)"
fi
grep -H '^ExecStart=' /lib/systemd/system/pinperf*.service
enabled=$(find /etc/systemd/system -name 'pinperf*' 2>/dev/null)
[ -z "$enabled" ] || fail "the install enabled a unit: $enabled"
echo "(neither unit enabled)"

step ls -l /etc/default/pinperf /etc/default/pinperf-mesh
ls -l /etc/default/pinperf /etc/default/pinperf-mesh

step "/usr/bin/pinperf --loopback -t 1 | fgrep '**'"
out=$(/usr/bin/pinperf --loopback -t 1) || fail "loopback test: exit $?: $out"
grep -F '**' <<<"$out" || fail "loopback test printed no total line: $out"

step /usr/lib/pinperf/iperf3 -v
ls -l /usr/lib/pinperf/iperf3
v=$(/usr/lib/pinperf/iperf3 -v)
echo "$v"
[[ $v == "iperf 3.21"* ]] || fail "the iperf3 link does not answer as iperf3"

# An admin who enabled a unit: a purge must take its links too.
if command -v systemctl >/dev/null; then
  step systemctl enable pinperf-mesh.service
  systemctl enable pinperf-mesh.service 2>&1
fi

step dpkg -r pinperf
dpkg -r pinperf
[ ! -e /usr/bin/pinperf ] || fail "/usr/bin/pinperf is still there after dpkg -r"
[ -e /etc/default/pinperf ] || fail "dpkg -r removed the conffile /etc/default/pinperf"
echo "(binary gone; conffiles kept until the purge: $(dpkg-query -W -f '${Status}' pinperf))"

step dpkg -P pinperf
dpkg -P pinperf

step leftovers
if dpkg -L pinperf >/dev/null 2>&1; then fail "dpkg -L pinperf still lists files"; fi
echo "dpkg -L pinperf: $(dpkg -L pinperf 2>&1 || true)"
after_paths=$(exists)
[ "$before_paths" = "$after_paths" ] ||
  fail "the package's paths differ from before the install:$(diff <(echo "$before_paths") <(echo "$after_paths") || true)"
after_named=$(named)
[ "$before_named" = "$after_named" ] ||
  fail "*pinperf* files differ from before the install:$(diff <(echo "$before_named") <(echo "$after_named") || true)"
echo "(none: the ${#paths[@]} paths of dpkg-deb -c, and the *pinperf* names in /etc /lib /usr /var/lib /opt, are as before the install)"
echo "check-deb: OK: $deb"
