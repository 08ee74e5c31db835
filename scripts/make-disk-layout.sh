#!/usr/bin/env bash
# Make the tacid layout on an empty disk or partition: one Btrfs filesystem, labelled as
# the layout says, with every subvolume of the layout at the top level.
#
#   scripts/make-disk-layout.sh [--force] DEVICE
#
# Names come from nixos-modules/layout.json (or $TACID_LAYOUT_JSON), which the layout
# crate renders; nothing is typed here. Needs mkfs.btrfs, btrfs, blkid, mount, and jq or
# python3. Refuses a device that already holds a filesystem (or anything blkid
# recognises) unless --force is given, and refuses a mounted device always.
set -euo pipefail

usage() {
  echo "usage: $0 [--force] DEVICE" >&2
  echo "  Makes the tacid Btrfs layout on DEVICE. DESTROYS what DEVICE holds." >&2
  exit 2
}

force=0
device=""
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h | --help) usage ;;
    -*) echo "$0: unknown option $arg" >&2; usage ;;
    *)
      if [ -n "$device" ]; then usage; fi
      device="$arg"
      ;;
  esac
done
[ -n "$device" ] || usage

here="$(cd "$(dirname "$0")" && pwd)"
layout_json="${TACID_LAYOUT_JSON:-$here/../nixos-modules/layout.json}"
if [ ! -r "$layout_json" ]; then
  echo "$0: cannot read the layout at $layout_json; set TACID_LAYOUT_JSON to nixos-modules/layout.json" >&2
  exit 1
fi

# query EXPR: one line per result, from the layout JSON. EXPR is a jq path; python3 is
# the fallback for the few expressions used here.
query() {
  if command -v jq >/dev/null 2>&1; then
    jq -r "$1" "$layout_json"
  else
    python3 - "$layout_json" "$1" <<'PY'
import json, sys
layout = json.load(open(sys.argv[1]))
expr = sys.argv[2]
if expr == ".subvolumes[] | [.name, (.mount_point // \"\")] | @tsv":
    for s in layout["subvolumes"]:
        print(s["name"] + "\t" + (s["mount_point"] or ""))
else:
    print(layout[expr.lstrip(".")])
PY
  fi
}

label="$(query .filesystem_label)"
root="$(query .root_subvolume)"
root_blank="$(query .root_blank_subvolume)"
snapshots="$(query .snapshots_subvolume)"
names=()
mounts=()
while IFS=$'\t' read -r name mount_point; do
  names+=("$name")
  mounts+=("$mount_point")
done < <(query '.subvolumes[] | [.name, (.mount_point // "")] | @tsv')

if [ ! -b "$device" ]; then
  echo "$0: $device is not a block device" >&2
  exit 1
fi
if grep -q "^$(readlink -f "$device") " /proc/mounts; then
  echo "$0: $device is mounted; unmount it first (this would destroy it)" >&2
  exit 1
fi
existing="$(blkid -p -o value -s TYPE "$device" 2>/dev/null || true)"
if [ -n "$existing" ] || blkid -p "$device" >/dev/null 2>&1; then
  if [ "$force" != 1 ]; then
    echo "$0: $device already holds ${existing:-something blkid recognises}; everything on it would be destroyed." >&2
    echo "  If that is what you want, run again with --force." >&2
    exit 1
  fi
fi

mkfs_force=()
if [ "$force" = 1 ]; then mkfs_force=(-f); fi
mkfs.btrfs -q "${mkfs_force[@]}" -L "$label" "$device"

top="$(mktemp -d)"
cleanup() {
  if mountpoint -q "$top"; then umount "$top"; fi
  rmdir "$top"
}
trap cleanup EXIT
# The top of the filesystem (subvolid 5), where every subvolume of the layout lives.
mount -o subvolid=5 "$device" "$top"

# The root is made from its blank, read-only template, exactly as every boot makes it.
btrfs -q subvolume create "$top/$root_blank"
btrfs property set -ts "$top/$root_blank" ro true
btrfs -q subvolume snapshot "$top/$root_blank" "$top/$root"
for name in "${names[@]}"; do
  if [ "$name" != "$root" ] && [ "$name" != "$root_blank" ]; then
    btrfs -q subvolume create "$top/$name"
  fi
done
# The snapshot store holds old copies of everybody's files: root only.
chmod 0700 "$top/$snapshots"

# Mount points nested in another mounted subvolume (other than the ephemeral root, which
# the system fills at boot) exist in that subvolume, so the mount never has to make them.
for i in "${!names[@]}"; do
  inner="${mounts[$i]}"
  [ -n "$inner" ] || continue
  for j in "${!names[@]}"; do
    outer="${mounts[$j]}"
    if [ -n "$outer" ] && [ "$outer" != "/" ] && [ "$i" != "$j" ] && [[ "$inner" == "$outer"/* ]]; then
      mkdir -p "$top/${names[$j]}/${inner#"$outer"/}"
    fi
  done
done

sync -f "$top"
echo "Made the tacid layout on $device (label $label):"
btrfs subvolume list -o "$top" | sed 's/^/  /'
