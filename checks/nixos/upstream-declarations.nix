# The options the tacid module sets or reads that the copied upstream modules
# (TACID_NIXOS_SUBSET; docs/nixos.md lists each file and the upstream commit it is from)
# do not declare, declared here with the type their upstream file gives them, so that the
# module is checked against those types: `_module.check` stays on, and an option nothing
# declares is an error.
#
# Each declaration names its upstream file in nixpkgs (NixOS/nixpkgs, nixos/modules/...)
# and carries that file's type; the defaults are upstream's where the evaluation reads
# them. Descriptions are shortened. Read from upstream with the project's search tool
# (repository NixOS/nixpkgs); docs/nixos.md lists them.
{ config, lib, pkgs, utils, ... }:
let
  inherit (lib) mkOption types;
  inherit (utils) systemdUtils;

  # The scripted initrd's hooks; nixos/modules/system/boot/systemd/initrd.nix asserts
  # that each is empty when the systemd initrd is on.
  scriptedInitrdHooks.options.boot.initrd = lib.genAttrs
    [
      # nixos/modules/system/boot/stage-1.nix
      "preFailCommands"
      "preDeviceCommands"
      "preLVMCommands"
      "postDeviceCommands"
      "postResumeCommands"
      "postMountCommands"
      "extraUdevRulesCommands"
      "extraUtilsCommands"
      "extraUtilsCommandsTest"
    ]
    (name: mkOption {
      default = "";
      type = types.lines;
      description = "A hook of the scripted initrd (${name}).";
    })
  // {
    # nixos/modules/system/boot/initrd-network.nix
    network.postCommands = mkOption {
      default = "";
      type = types.lines;
      description = "Shell commands to be executed after stage 1 of the boot has initialised the network.";
    };
  };
in
{
  imports = [ scriptedInitrdHooks ];

  options = {
    # nixos/modules/system/boot/systemd.nix
    systemd.package = lib.mkPackageOption pkgs "systemd" { };
    systemd.packages = mkOption {
      default = [ ];
      type = types.listOf types.package;
      description = "Packages providing systemd units and hooks.";
    };
    systemd.services = mkOption {
      default = { };
      type = systemdUtils.types.services;
      description = "Definition of systemd service units; see {manpage}`systemd.service(5)`.";
    };
    systemd.paths = mkOption {
      default = { };
      type = systemdUtils.types.paths;
      description = "Definition of systemd path units; see {manpage}`systemd.path(5)`.";
    };
    # Set by the impermanence module (checks/nixos/eval-impermanence.nix).
    systemd.mounts = mkOption {
      default = [ ];
      type = systemdUtils.types.mounts;
      description = "Definition of systemd mount units; see {manpage}`systemd.mount(5)`.";
    };
    # The receiver's socket (adr/0025).
    systemd.sockets = mkOption {
      default = { };
      type = systemdUtils.types.sockets;
      description = "Definition of systemd socket units; see {manpage}`systemd.socket(5)`.";
    };
    systemd.timers = mkOption {
      default = { };
      type = systemdUtils.types.timers;
      description = "Definition of systemd timer units; see {manpage}`systemd.timer(5)`.";
    };
    # Read by systemd-lib.nix for every service (its `enableStrictShellChecks` default).
    systemd.enableStrictShellChecks = lib.mkEnableOption "" // {
      description = "Whether to run `shellcheck` on the generated scripts for systemd units.";
    };
    # Read by systemd-lib.nix when it renders a unit's environment.
    systemd.globalEnvironment = mkOption {
      default = { };
      type = with types; attrsOf (nullOr (oneOf [ str path package ]));
      description = "Environment variables passed to *all* systemd units.";
    };

    # nixos/modules/system/boot/systemd/user.nix: the notifier's user unit (adr/0028).
    systemd.user.services = mkOption {
      default = { };
      type = systemdUtils.types.services;
      description = "Definition of systemd per-user service units.";
    };

    # nixos/modules/system/boot/systemd/tmpfiles.nix
    systemd.tmpfiles.rules = mkOption {
      type = types.listOf types.str;
      default = [ ];
      description = "Rules for creation, deletion and cleaning of volatile and temporary files; see {manpage}`tmpfiles.d(5)`.";
    };

    # nixos/modules/services/system/dbus.nix
    services.dbus.packages = mkOption {
      type = types.listOf types.path;
      default = [ ];
      description = "Packages whose D-Bus configuration files should be included in the configuration of the D-Bus system-wide or session-wide message bus.";
    };

    # nixos/modules/config/system-path.nix
    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
      description = "The set of packages that appear in /run/current-system/sw.";
    };

    # nixos/modules/system/boot/kernel.nix
    boot.kernelParams = mkOption {
      type = types.listOf (
        types.strMatching ''([^"[:space:]]|"[^"]*")+''
        // {
          name = "kernelParam";
          description = "string, with spaces inside double quotes";
        }
      );
      default = [ ];
      description = "Parameters added to the kernel command line.";
    };

    # nixos/modules/system/boot/stage-1.nix
    boot.initrd.enable = mkOption {
      type = types.bool;
      default = !config.boot.isContainer;
      description = "Whether to enable the NixOS initial RAM disk (initrd).";
    };
    # Read by initrd.nix for its kernel command line.
    boot.resumeDevice = mkOption {
      type = types.str;
      default = "";
      description = "Device for manual resume attempt during boot.";
    };
    # nixos/modules/system/boot/stage-1.nix adds neededForBoot to every file system.
    fileSystems = mkOption {
      type = types.attrsOf (types.submodule {
        options.neededForBoot = mkOption {
          default = false;
          type = types.bool;
          description = "If set, this file system will be mounted in the initial ramdisk.";
        };
      });
    };

    # nixos/modules/virtualisation/nixos-containers.nix
    boot.isContainer = mkOption {
      type = types.bool;
      default = false; # upstream: config.boot.isNspawnContainer, false but in nspawn
      description = "Whether this NixOS machine is a lightweight container running in another NixOS system.";
    };

    # nixos/modules/system/etc/etc.nix (newer nixpkgs: `enable` renamed to
    # system.etc.confext.enable, still readable here by its old name)
    system.etc.overlay.enable = mkOption {
      type = types.bool;
      default = false;
      description = "Mount `/etc` as an overlayfs instead of generating it via a perl script.";
    };
    system.etc.overlay.mutable = mkOption {
      type = types.bool;
      default = true;
      description = "Whether to mount `/etc` mutably (i.e. read-write) or immutably (i.e. read-only).";
    };

    # nixos/modules/system/boot/systemd/sysusers.nix (read by users-groups.nix too)
    systemd.sysusers.enable = lib.mkEnableOption "systemd-sysusers";

    # nixos/modules/services/networking/ssh/sshd.nix
    services.openssh.hostKeys = mkOption {
      type = types.listOf types.attrs;
      default = [
        { type = "rsa"; bits = 4096; path = "/etc/ssh/ssh_host_rsa_key"; }
        { type = "ed25519"; path = "/etc/ssh/ssh_host_ed25519_key"; }
      ];
      description = "NixOS can automatically generate SSH host keys. This option specifies the path, type and size of each key.";
    };

    # nixos/modules/services/system/userborn.nix
    services.userborn.enable = lib.mkEnableOption "userborn";
    services.userborn.passwordFilesLocation = mkOption {
      type = types.str;
      default = if config.system.etc.overlay.enable && !config.system.etc.overlay.mutable then "/var/lib/nixos" else "/etc";
      description = "The location of the original password files. If this is not `/etc`, the files are symlinked from this location to `/etc`.";
    };

    # nixos/modules/programs/shadow.nix
    users.defaultUserShell = mkOption {
      default = "/bin/sh";
      type = types.either types.path types.shellPackage;
      description = "The default shell assigned to user accounts.";
    };

    # Options the copied upstream modules set but nothing evaluated here reads: their
    # values are not checked (lib.mkSinkUndeclaredOptions); tacid sets none of them.
    system.activationScripts = lib.mkSinkUndeclaredOptions { };
    system.build = lib.mkSinkUndeclaredOptions { };
    environment.etc = lib.mkSinkUndeclaredOptions { };
    environment.profiles = lib.mkSinkUndeclaredOptions { };
    systemd.targets = lib.mkSinkUndeclaredOptions { };
    boot.initrd.availableKernelModules = lib.mkSinkUndeclaredOptions { };
  };

  config = {
    # nixos/modules/misc/ids.nix (newer than the copy, which predates it); read by
    # users-groups.nix.
    ids.gids.clock = 327;
    # nixos/modules/system/boot/systemd.nix; the initrd's group list needs it.
    users.groups.systemd-journal.gid = config.ids.gids.systemd-journal;
  };
}
