# shellcheck shell=bash
# The Debian packages the story and the tests use, installed when missing. Sourced.
TACID_DEBIAN_PACKAGES=(
    btrfs-progs          # mkfs.btrfs; the btrfs CLI is the tests' independent oracle
    dbus                 # dbus-daemon for the private system bus
    systemd              # systemd-analyze verify / security on the unit files
    util-linux           # losetup, mount, setpriv
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
