#!/bin/sh
# The base root file system of the sandbox image, from Debian packages only.
#
# Usage: rootfs.sh OUTPUT.tar [MIRROR]
#
# debootstrap (variant minbase) of Debian bookworm with the interpreter (venv, and tkinter,
# which some evaluation scripts import) and nothing a sandboxed run does not need; package
# caches, lists and documentation are dropped. The
# tarball is what `docker import` turns into the image the Dockerfile builds on. Needs
# root and debootstrap (apt-get install debootstrap); the mirror defaults to
# $GYM_REPOST_DEBIAN_MIRROR, then http://deb.debian.org/debian.
set -eu

out=${1:?usage: rootfs.sh OUTPUT.tar [MIRROR]}
mirror=${2:-${GYM_REPOST_DEBIAN_MIRROR:-http://deb.debian.org/debian}}
suite=bookworm
packages=python3,python3-venv,python3-tk,ca-certificates

if [ "$(id -u)" != 0 ]; then
  echo "rootfs.sh: debootstrap needs root" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "rootfs.sh: debootstrap is not installed (apt-get install debootstrap)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gym-repost-rootfs.XXXXXX")
root="$work/root"
cleanup() {
  # debootstrap mounts these inside the target; never delete through a mount
  for mount in proc sys dev/pts dev; do
    umount -l "$root/$mount" 2>/dev/null || true
  done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT INT TERM

debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror"

rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
  "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
  "$root"/usr/share/info/* "$root"/var/log/*.log "$root"/var/log/apt/*
tar --numeric-owner -C "$root" -cf "$out.partial" .
mv "$out.partial" "$out"
