#!/bin/bash
# More English -> German pairs for T5 EnDe: German gettext catalogues from Debian packages that
# this machine lacks, unpacked into data/debian_catalogues/ (ignored by git, never committed).
#
#   bash scripts/fetch_debian_catalogues.sh            # ~20 s, 114 catalogues: 136k training pairs, not 39k
#   python scripts/train_t5_ende.py --stage=target --extra_catalogues=data/debian_catalogues ...
#
# Needs only the Debian package registry (apt-get download: no root, no install). Catalogues
# whose name is already on the system (/usr/share/locale/de) are the same strings and add nothing.
set -euo pipefail
PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}"; export PYTHONPATH  # specjax, for the held-out list
# Command-line tools first, then desktop programs (their UI strings still teach German). Games'
# story text (wesnoth) and LibreOffice are left out: prose of another kind, and very large.
PACKAGES="gcc-12-locales util-linux-locales e2fsprogs-l10n aptitude-common sudo
  binutils-common bison flex m4 gawk cpio texinfo libparted-i18n mc-data nano vim-common dialog
  libnewt0.52 libpopt0 cryptsetup-bin kbd debconf-i18n sharutils enscript a2ps recode wdiff indent
  cflow lynx-common mutt neomutt fish-common elinks-data w3m fetchmail msmtp quota acl attr xfsprogs
  sysstat grub-common vorbis-tools gphoto2 libgphoto2-l10n libexiv2-27 udisks2 accountsservice
  libsecret-common zenity-common gettext tasksel-data apt-listchanges unattended-upgrades
  network-manager modemmanager libgtk-3-common libgtk-4-common gvfs-common nautilus-data
  gedit-common gnome-shell-common mutter-common synaptic gparted meld geany-common filezilla-common
  hexchat-common pidgin-data transmission-common rhythmbox-data totem-common file-roller
  gnome-control-center-data evolution-data-server-common gimp-data inkscape vlc-l10n audacity-data
  gnumeric-common abiword-common libsane-common sane-utils cups-common iso-codes gnupg-l10n
  libgpg-error-l10n pulseaudio alsa-utils gnome-terminal-data xfce4-panel thunar-data xfce4-session
  mousepad ristretto libxfce4ui-common dolphin konsole kate gwenview okular ark plasma-workspace"
OUT="${1:-data/debian_catalogues}"
mkdir -p "$OUT"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download $PACKAGES >/dev/null)
for deb in "$tmp"/*.deb; do
  dpkg-deb -x "$deb" "$tmp/root"
done
find "$tmp/root" -path "*/locale/de/LC_MESSAGES/*.mo" -exec cp {} "$OUT"/ \;
# A catalogue named like one on this machine would merge into it, and one named like a held-out
# catalogue (specjax.data.ende.HELD_OUT_CATALOGUES) would change the evaluation set: drop both.
held_out=" $(python -c 'from specjax.data import ende; print(" ".join(ende.HELD_OUT_CATALOGUES))') "
for mo in "$OUT"/*.mo; do
  stem="$(basename "$mo" .mo)"
  case "$held_out" in *" $stem "*) rm "$mo"; continue;; esac
  if [ -e "/usr/share/locale/de/LC_MESSAGES/$stem.mo" ]; then rm "$mo"; fi
done
echo "$(ls "$OUT" | wc -l) catalogues in $OUT"
