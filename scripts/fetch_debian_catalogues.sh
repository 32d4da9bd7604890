#!/bin/bash
# More English -> German pairs for T5 EnDe: German gettext catalogues from Debian packages that
# this machine lacks, unpacked into data/debian_catalogues/ (ignored by git, never committed).
#
#   bash scripts/fetch_debian_catalogues.sh            # ~10 s, 24k more pairs in 7 catalogues
#   python scripts/train_t5_ende.py --stage=target --extra_catalogues=data/debian_catalogues ...
#
# Needs only the Debian package registry (apt-get download: no root, no install). Catalogues
# whose name is already on the system (/usr/share/locale/de) are the same strings and add nothing.
set -euo pipefail
PACKAGES="gcc-12-locales util-linux-locales e2fsprogs-l10n aptitude-common sudo"
OUT="${1:-data/debian_catalogues}"
mkdir -p "$OUT"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download $PACKAGES)
for deb in "$tmp"/*.deb; do
  dpkg-deb -x "$deb" "$tmp/root"
done
find "$tmp/root" -path "*/locale/de/LC_MESSAGES/*.mo" -exec cp {} "$OUT"/ \;
ls "$OUT"
