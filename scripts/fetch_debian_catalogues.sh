#!/bin/bash
# More English -> German pairs for T5 EnDe: German gettext catalogues from Debian packages that
# this machine lacks, unpacked into data/debian_catalogues/ (ignored by git, never committed).
#
#   bash scripts/fetch_debian_catalogues.sh            # ~1 min, 314 catalogues: 206k training pairs, not 39k
#   python -m specjax.train t5_ende --stage=target --extra_catalogues=data/debian_catalogues ...
#
# Needs only the Debian package registry (apt-get download: no root, no install). Catalogues
# whose name is already on the system (/usr/share/locale/de) are the same strings and add nothing.
set -euo pipefail
PYTHONPATH="$(dirname "$0")/..${PYTHONPATH:+:$PYTHONPATH}"; export PYTHONPATH  # specjax, for the held-out list
# Command-line tools first, then desktop programs (their UI strings still teach German), then a
# second wave of KDE, GNOME, XFCE and MATE programs and LibreOffice. Games' story text (wesnoth)
# and the two big atlases (kstars-data, marble-data: 107 MB) are left out.
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
  mousepad ristretto libxfce4ui-common dolphin konsole kate gwenview okular ark plasma-workspace
  kdenlive-data digikam-data kmail korganizer kontact k3b-i18n k3b-data kdevelop konversation
  ktorrent kwrite elisa kcalc kmix kdeconnect systemsettings plasma-desktop-data kwin-common
  libkf5widgetsaddons-data libkf5xmlgui-data libkf5textwidgets-data libkf5configwidgets-data
  libkf5coreaddons-data libkf5kiofilewidgets5 libkf5parts-data libkf5service-data
  libkf5notifications-data libkf5completion-data libkf5bookmarks-data libkf5wallet-data
  libkf5newstuff-data libkf5sonnet5-data libkf5akonadi-data kleopatra akregator kaddressbook
  evince-common eog gnome-software-common gnome-disk-utility seahorse brasero-common cheese-common
  gucharmap gnome-calculator gnome-system-monitor baobab simple-scan shotwell-common orca
  xfce4-settings xfdesktop4-data xfwm4 xfce4-terminal xfce4-power-manager-data xfce4-notifyd parole
  libexo-common xfce4-appfinder xfburn catfish mate-desktop-common caja-common pluma-common
  mate-panel-common mate-control-center-common atril-common engrampa-common eom-common
  mate-terminal-common mate-power-manager-common mate-settings-daemon-common gnucash-common
  darktable gramps lyx-common poedit-common pitivi gpodder gajim deluge-common virt-manager
  system-config-printer-common blueman aisleriot gnome-chess hugin-data scribus-data calibre-bin
  gnome-maps gnome-weather gnome-contacts gnome-calendar gnome-clocks gnome-music gnome-photos
  polari epiphany-browser-data yelp gnome-logs gnome-characters gnome-font-viewer gnome-tweaks
  gnome-initial-setup dconf-editor tracker-miner-fs lightdm-gtk-greeter xfce4-screenshooter
  xfce4-taskmanager xfce4-whiskermenu-plugin remmina-common vinagre gthumb-data gnome-boxes geary
  libreoffice-l10n-de"
OUT="${1:-data/debian_catalogues}"
mkdir -p "$OUT"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download $PACKAGES >/dev/null)
for deb in "$tmp"/*.deb; do
  dpkg-deb -x "$deb" "$tmp/root"
done
# Most packages use share/locale/de; some (deluge) their own i18n/de. LibreOffice's catalogues have
# short names (sw, sc, ...), so they get a prefix that cannot collide with another program's.
find "$tmp/root" -path "*/de/LC_MESSAGES/*.mo" -not -path "*/libreoffice/*" -exec cp {} "$OUT"/ \;
for mo in "$tmp"/root/usr/lib/libreoffice/program/resource/de/LC_MESSAGES/*.mo; do
  cp "$mo" "$OUT/libreoffice-$(basename "$mo")"
done
# A catalogue named like one on this machine would merge into it, and one named like a held-out
# catalogue (specjax.data.ende.HELD_OUT_CATALOGUES) would change the evaluation set: drop both.
held_out=" $(python -c 'from specjax.data import ende; print(" ".join(ende.HELD_OUT_CATALOGUES))') "
for mo in "$OUT"/*.mo; do
  stem="$(basename "$mo" .mo)"
  case "$held_out" in *" $stem "*) rm "$mo"; continue;; esac
  if [ -e "/usr/share/locale/de/LC_MESSAGES/$stem.mo" ]; then rm "$mo"; fi
done
echo "$(ls "$OUT" | wc -l) catalogues in $OUT"
