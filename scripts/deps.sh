# shellcheck shell=bash
# The Debian packages the story and the tests use, installed when missing. Sourced.
TACID_DEBIAN_PACKAGES=(
    btrfs-progs          # mkfs.btrfs; the btrfs CLI is the tests' independent oracle
    dbus                 # dbus-daemon for the private system bus
    systemd              # systemd-analyze verify / security on the unit files
    util-linux           # losetup, mount, setpriv
    e2fsprogs            # mkfs.ext4: the story's sealed directory target is a stick with ext4
    passwd               # useradd/groupadd for the real users of the bus tier
    snapper              # the bench compares against it
    qemu-system-x86      # the boot tier
    qemu-utils
    dracut-core dracut   # the boot tier's systemd initrd
    busybox-static       # the boot tier's minimal root
    cpio zstd kmod lz4   # lz4: the kernel uncompressed for a PVH boot
    nix-bin              # parsing and evaluating the Nix files offline
    jq
    pyflakes3            # lints the NixOS test script the flake renders
    mypy                 # type-checks it, as the NixOS test driver does (Debian 12: 1.0.1)
    shellcheck           # the pre-switch script, as writeShellApplication checks it; copies/tacid-copy-target
    openssh-server       # a real sshd as the SSH copy target (testbed::ssh)
    openssh-client       # ssh and ssh-keygen for it
    iproute2             # ip netns: the sshd's network namespace
    btrbk                # the copies bench compares against it
    restic age           # the sealed-copies bench compares against them (with zstd)
    rclone               # the sealed copies bench's raw floor into Garage (rclone rcat)
    prometheus           # promtool check metrics: the health metrics (adr/0028)
    dunst xvfb           # a real notification server on a real X display: tacid-notify's test
)

install_debian_packages() {
    local missing=()
    for p in "${TACID_DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "==> installing Debian packages: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# Garage, the S3-compatible object store the sealed-copy tests and the story store copies in.
# Built from crates.io once (about 10 minutes on two cores with its default features; less
# with only the sqlite engine and no metrics, and with optimisation that a test store does not
# need) and kept in a cache outside the checkout, so a second run finds it. Prints its path.
TACID_GARAGE_VERSION=2.5.0
tacid_deps_cache() { echo "${TACID_DEPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tacid-deps}"; }
ensure_garage() {
    local root; root="$(tacid_deps_cache)/garage-$TACID_GARAGE_VERSION"
    if [ ! -x "$root/bin/garage" ]; then
        echo "==> building Garage $TACID_GARAGE_VERSION once into $root (several minutes)" >&2
        CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0 \
        CARGO_TARGET_DIR="$(tacid_deps_cache)/garage-build" \
            cargo install garage --version "$TACID_GARAGE_VERSION" --locked --quiet \
                --no-default-features --features sqlite,bundled-libs --root "$root" >&2
        rm -rf "$(tacid_deps_cache)/garage-build"
    fi
    echo "$root/bin/garage"
}
