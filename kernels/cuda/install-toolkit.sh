#!/bin/sh
# install-toolkit.sh installs the CUDA 11.8 toolkit (nvcc, ptxas, cuda.h and
# a link-time libcuda) from Debian's contrib and non-free components.
#
# It reuses the Debian mirror the machine's apt sources already name, adds
# the two components for the release's main suite in a sources entry of its
# own, and installs nvidia-cuda-toolkit and nvidia-cuda-dev (about 5 GB).
# It is idempotent: with nvcc already on PATH it does nothing. Run it as
# root, or as a user sudo lets run apt-get.
set -eu

if command -v nvcc >/dev/null 2>&1; then
	echo "install-toolkit: nvcc already installed: $(command -v nvcc)"
	exit 0
fi

SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi

. /etc/os-release
codename=${VERSION_CODENAME:?cannot tell the Debian release}

# The first mirror that serves "$codename" in the existing sources, in
# either the deb822 (.sources) or the one-line (.list) format.
mirror=
for f in /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] || continue
	mirror=$(awk -v want="$codename" '
		/^[ \t]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
		/^URIs:/ { uri = $2 }
		/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == want) ok = 1 }
		END { if (uri != "" && ok) print uri }' "$f" | head -n 1)
	[ -n "$mirror" ] && break
done
if [ -z "$mirror" ]; then
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		mirror=$(awk -v want="$codename" '
			$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i+1) == want) { print $i; exit } }' "$f")
		[ -n "$mirror" ] && break
	done
fi
if [ -z "$mirror" ]; then
	echo "install-toolkit: no apt source for $codename found" >&2
	exit 1
fi
echo "install-toolkit: using $mirror $codename contrib non-free"

entry=/etc/apt/sources.list.d/cuda-nonfree.sources
if [ ! -f "$entry" ]; then
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	{
		echo "Types: deb"
		echo "URIs: $mirror"
		echo "Suites: $codename ${codename}-updates"
		echo "Components: contrib non-free"
		if [ -f "$keyring" ]; then
			echo "Signed-By: $keyring"
		fi
	} | $SUDO tee "$entry" >/dev/null
fi

$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
	nvidia-cuda-toolkit nvidia-cuda-dev
nvcc --version
