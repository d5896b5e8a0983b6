#!/usr/bin/env bash
# Builds the Debian package from this tree: target/debian/pinperf_VERSION_ARCH.deb.
#
#   packaging/build-deb.sh           # cargo build --release, then the .deb; prints its path
#
# Plain dpkg-deb, no cargo-deb: this needs only what a Debian host with Rust has (dpkg-dev
# for dpkg-shlibdeps, binutils' strip), while cargo-deb is not packaged by Debian and
# `cargo install cargo-deb` compiles it on every fresh CI machine (docs/packaging.md).
# The man page and completions come from the built binary (`pinperf man`, `pinperf
# completions`), the units from contrib/ with the binary at /usr/bin. Set DEBFULLNAME and
# DEBEMAIL to name who built it (the Maintainer field).
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
root=$PWD

for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (apt-get install dpkg-dev binutils gzip)" >&2; exit 2; }
done

name=pinperf
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
target=${CARGO_TARGET_DIR:-$root/target}
maintainer="${DEBFULLNAME:-pinperf developers} <${DEBEMAIL:-pinperf@builders.invalid}>"
# Timestamps from the commit, so two builds of one tree give the same files.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

cargo build --release --locked
bin=$target/release/$name

# The package's tree, laid out as dpkg-shlibdeps expects (debian/control beside it).
work=$target/debian/tree
stage=$work/debian/$name
deb=$target/debian/${name}_${version}_${arch}.deb
rm -rf "$work" "$deb"
d() { install -d -m 0755 "$stage/$1"; }
f() { install -D -m 0644 /dev/stdin "$stage/$1"; }   # stdin to a 0644 file

# The binary, stripped as dh_strip does; the iperf3 personality beside it, off PATH so it
# cannot collide with Debian's iperf3 (/usr/bin/iperf3).
d usr/bin
strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "$stage/usr/bin/$name" "$bin"
chmod 0755 "$stage/usr/bin/$name"
d usr/lib/$name
ln -s ../../bin/$name "$stage/usr/lib/$name/iperf3"

"$bin" man | gzip -9n | f usr/share/man/man1/$name.1.gz
"$bin" completions bash | f usr/share/bash-completion/completions/$name
"$bin" completions zsh | f usr/share/zsh/vendor-completions/_$name
"$bin" completions fish | f usr/share/fish/vendor_completions.d/$name.fish

# The units from contrib/, with the packaged binary and without the from-source install
# steps of their header comment (Debian 12 keeps units in /lib/systemd/system).
for unit in $name.service $name-mesh.service; do
  awk '/^# Install/ { skip = 1; next }
       skip && /^#$/ { skip = 0; print "# Installed by the pinperf package, disabled: systemctl enable --now '"${unit%.service}"'"; print; next }
       !skip' "contrib/$unit" | sed -e 's|/usr/local/bin/pinperf|/usr/bin/pinperf|g' -e 's|contrib/pinperf.service|pinperf.service|g' | f "lib/systemd/system/$unit"
  if grep -q /usr/local "$stage/lib/systemd/system/$unit"; then
    echo "build-deb: $unit still names /usr/local after rewriting contrib/$unit" >&2; exit 1
  fi
done
f etc/default/$name <packaging/default/$name
f etc/default/$name-mesh <packaging/default/$name-mesh
# Lintian's remaining tags, each with its reason (docs/packaging.md).
f usr/share/lintian/overrides/$name <packaging/lintian-overrides

doc=usr/share/doc/$name
f $doc/copyright < <(
  cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pinperf
Upstream-Contact: https://github.com/pinperf/pinperf/issues
Source: https://github.com/pinperf/pinperf
Comment: /usr/bin/pinperf statically links these Rust crates (Cargo.lock), each under
 the license named beside it:
EOF
  cargo tree --locked -e normal,no-proc-macro --prefix none --format '{p} {l}' |
    sed 's/ (\*)$//' | grep -v "^$name v" | sort -u | sed 's/^/ /'
  cat <<'EOF'

Files: *
Copyright: 2026 The pinperf developers
License: MIT or Apache-2.0

License: MIT
EOF
  sed -e '1,4d' -e 's/^$/./' -e 's/^/ /' LICENSE-MIT
  cat <<'EOF'

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this file except in compliance with the License. You may obtain a copy of
 the License at http://www.apache.org/licenses/LICENSE-2.0
 .
 On Debian systems, the complete text of the Apache License 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
EOF
)
rev=$(git describe --always --dirty 2>/dev/null || echo unknown)
{
  echo "$name ($version) unstable; urgency=medium"
  echo
  echo "  * Built from the pinperf tree at $rev."
  echo
  echo " -- $maintainer  $(date -R -u -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n | f $doc/changelog.gz

# Control: dependencies as dpkg-shlibdeps reads them off the binary (it wants a
# debian/control, here a stub, and DEBIAN/ in the package's root).
install -d -m 0755 "$stage/DEBIAN"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$name" "$name" >"$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O "debian/$name/usr/bin/$name" | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$stage/DEBIAN/"
printf '/etc/default/%s\n/etc/default/%s-mesh\n' "$name" "$name" >"$stage/DEBIAN/conffiles"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/conffiles" "$stage/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends
Suggests: fonts-dejavu-core
Section: net
Priority: optional
Homepage: https://github.com/pinperf/pinperf
Description: pinned thread-per-stream TCP and UDP throughput tester
 pinperf measures TCP and UDP throughput between two hosts on 10 GbE and
 faster links and on long fat paths. Each stream has its own OS thread, pinned
 to a core on both ends; rows show what the receiver read, a block RTT beside
 the kernel's RTT, retransmits, cwnd and fairness across streams.
 .
 It speaks iperf3's protocol as client and server, and run as iperf3 (the
 link /usr/lib/pinperf/iperf3) it takes iperf3's command line. The package
 holds the man page, bash, zsh and fish completions, and two systemd units, a
 hardened server and a mesh server on iperf3's port, neither enabled.
 .
 Plots rendered to PNG draw their text in a system font (fonts-dejavu-core).
EOF
chmod 0644 "$stage/DEBIAN/control"

find "$stage" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
