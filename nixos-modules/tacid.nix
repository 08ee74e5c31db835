# services.tacid: the data leg of a NixOS rollback on Btrfs.
#
# Names (subvolumes, mount points, units, bus names, the keeper's user) come from
# layout.json through lib.nix; none is typed here.
{ config
, options
, lib
, pkgs
, utils
, ...
}:
let
  tacidLib = import ./lib.nix;
  inherit (tacidLib) layout shipped;
  # Every option's default is the layout's (layout::defaults, rendered into layout.json).
  d = layout.defaults;
  cfg = config.services.tacid;

  bin = which: "${cfg.package}/bin/${shipped.binaries.${which}.name}";

  # The initrd units exactly as the package ships them, copied into a small store path
  # of their own so the initrd does not pull in the whole package. Without the ephemeral
  # root, only the restore.
  wipeUnit = layout.initrd_wipe_root_unit;
  ourInitrdUnits = lib.filter (u: cfg.ephemeralRoot || u != wipeUnit) tacidLib.initrdUnits;
  initrdUnits = pkgs.runCommand "tacid-initrd-units" { } ''
    mkdir -p $out/lib/systemd/system
    ${lib.concatMapStringsSep "\n" (
      unit: "cp ${cfg.package}/${tacidLib.initrdUnitsDir}/${unit} $out/lib/systemd/system/${unit}"
    ) ourInitrdUnits}
  '';

  # What else mounts into the new root in the initrd, or makes directories on the disk
  # there: impermanence's bind mounts under /sysroot (before initrd-nixos-activation) and
  # its older create-needed-for-boot-dirs.service, which mounts the persistent subvolume
  # itself. tacid's units go first, so nothing writes into a subvolume a restore is
  # replacing, or holds one it deletes. An ordering on a unit that does not exist is
  # harmless.
  initrdMountsIntoRoot = map (m: "${utils.escapeSystemdPath m.where}.mount")
    (lib.filter (m: lib.hasPrefix "/sysroot/" m.where) config.boot.initrd.systemd.mounts);
  beforeInitrdUnits = [ "create-needed-for-boot-dirs.service" ] ++ initrdMountsIntoRoot;

  # The essentials kept on the persistent subvolume (adr/0022), by option.
  essentials = cfg.persistEssentials;
  ephemeral = cfg.ephemeralRoot;
  # Each host key on the root that is made again (/etc/ssh by default, or wherever
  # services.openssh.hostKeys puts it); one on a filesystem of its own is kept there.
  sshHostKeyFiles = lib.concatMap (k: [ k.path "${k.path}.pub" ])
    (lib.filter (k: k ? path && tacidLib.mountHolding config.fileSystems k.path == "/")
      (config.services.openssh.hostKeys or defaultHostKeys));
  # nixos/modules/services/networking/ssh/sshd.nix's default, for a machine without it.
  defaultHostKeys = [
    { type = "rsa"; bits = 4096; path = "/etc/ssh/ssh_host_rsa_key"; }
    { type = "ed25519"; path = "/etc/ssh/ssh_host_ed25519_key"; }
  ];
  # userborn with its files elsewhere (services.userborn.passwordFilesLocation; the
  # default with an immutable /etc), and systemd-sysusers with an immutable /etc (in
  # /var/lib/nixos/etc), make /etc/passwd and its kin links to them: there they are kept,
  # or not, with that directory (/var/lib/nixos: nixosIds).
  usersInEtc = !(((config.services.userborn.enable or false)
    && (config.services.userborn.passwordFilesLocation or "/etc") != "/etc")
  || ((config.systemd.sysusers.enable or false) && immutableEtc));
  essentialFiles = tacidLib.essentialFiles sshHostKeyFiles // lib.optionalAttrs (!usersInEtc) { users = [ ]; };
  chosen = attrs: lib.concatLists (lib.mapAttrsToList (option: paths: lib.optionals (ephemeral && essentials.${option}) paths) attrs);
  keptDirs = chosen tacidLib.essentialDirs;
  keptFiles = chosen essentialFiles;
  keptByTacid = lib.concatLists (lib.mapAttrsToList
    (option: paths: map (path: { inherit option path; }) (lib.optionals (ephemeral && essentials.${option}) paths))
    (tacidLib.essentialDirs // essentialFiles));
  # Where the copies go in the new root: each one's directory, under /sysroot, so that the
  # initrd copies after whatever is mounted there (the /etc overlay of
  # system.etc.overlay), not into the directory it then hides.
  keptFileDirs = lib.unique (map (f: "/sysroot${dirOf f}") keptFiles);
  # system.etc.overlay with mutable = false: /etc is read-only, nothing can be copied in.
  immutableEtc = (config.system.etc.overlay.enable or false) && !(config.system.etc.overlay.mutable or true);
  keptInEtc = lib.filter (x: lib.hasPrefix "/etc/" x.path) (lib.filter (x: lib.elem x.path keptFiles) keptByTacid);
  persistEssentialsUnit = "tacid-persist-essentials";
  sshUnits = lib.optionals (ephemeral && essentials.sshHostKeys) [ "sshd.service" "sshd-keygen.service" ];
  saveEssentials = pkgs.writeShellScriptBin persistEssentialsUnit (tacidLib.persistEssentialsSaveScript {
    coreutils = "${pkgs.coreutils}";
    dirs = keptDirs;
    files = keptFiles;
  });
  keptDirMountUnits = map (tacidLib.sysrootMountUnit utils.escapeSystemdPath) keptDirs;

  # environment.persistence, when the impermanence module is there, its enabled stores.
  persistence = lib.filterAttrs (_: p: p.enable)
    (if options ? environment.persistence then config.environment.persistence else { });

  skipFile = tacidLib.preSwitchSkipFile;

  # What the module changes in the shipped daemon units, as drop-ins that keep each
  # ExecStart word for word except the values set here: the keeper's approver group and
  # retention policy, the stem's hard floor and (when it is not the default) its device;
  # and, with retention.timeline = false, the timeline service runs only its prune.
  unitDir = "lib/systemd/system";
  userUnitDir = "lib/systemd/user";
  r = cfg.retention;
  keeperValues = [
    { flag = "--approver-group"; value = cfg.approverGroup; }
    { flag = "--keep-pre-switch-sets"; value = toString r.preSwitchSets; }
    { flag = "--keep-hourly"; value = toString r.hourly; }
    { flag = "--keep-daily"; value = toString r.daily; }
    { flag = "--keep-weekly"; value = toString r.weekly; }
    { flag = "--keep-monthly"; value = toString r.monthly; }
    { flag = "--manual-max-age-days"; value = toString r.manualMaxAgeDays; }
    { flag = "--free-floor-bytes"; value = toString r.freeFloorBytes; }
    { flag = "--keep-replaced-days"; value = toString r.keepReplacedDays; }
    { flag = "--health-snapshot-warn-secs"; value = toString hc.snapshotWarnSeconds; }
    { flag = "--health-snapshot-fail-secs"; value = toString hc.snapshotFailSeconds; }
    { flag = "--health-copy-warn-secs"; value = toString hc.copyWarnSeconds; }
    { flag = "--health-copy-fail-secs"; value = toString hc.copyFailSeconds; }
    { flag = "--health-verify-warn-secs"; value = toString hc.verifyWarnSeconds; }
    { flag = "--health-staged-wait-secs"; value = toString hc.stagedWaitSeconds; }
    { flag = "--health-days-left-warn"; value = toString hc.daysLeftWarn; }
    { flag = "--health-days-left-fail"; value = toString hc.daysLeftFail; }
    # With the timeline off, health expects no hourly set (adr/0028).
    { flag = "--timeline"; value = lib.boolToString r.timeline; }
  ] ++ copiesValue;
  hc = cfg.health;
  # Alerts and metrics (adr/0028): every timer's unit alerts when it fails, and writes the
  # metrics after each run when a directory is given.
  alertOnFailure = [ (lib.replaceStrings [ "@." ] [ "@%n." ] layout.alert_unit) ];
  # The keeper writes them too, after every scheduled act and every few minutes: it may
  # write in the directory by an ACL (tmpfiles) and its unit's ReadWritePaths=.
  metricsFile = "${cfg.metrics.directory}/tacid.prom";
  metricsStopPost = lib.optional (cfg.metrics.directory != null)
    "-${bin "cli"} data health --metrics-file ${metricsFile}";
  stemValues = [
    { flag = "--hard-floor-bytes"; value = toString r.hardFloorBytes; }
    { flag = "--open-idle-secs"; value = toString cfg.open.idleSeconds; }
    { flag = "--opens-per-user"; value = toString cfg.open.perUser; }
    { flag = "--opens-total"; value = toString cfg.open.total; }
  ]
  ++ copiesValue
  ++ cutValue
  ++ (if cfg.device != layout.default_device then [{ flag = "--device"; value = cfg.device; }] else [ ]);
  unitDropIns = pkgs.runCommand "tacid-unit-drop-ins" { } ''
    set -euo pipefail
    mkdir -p $out/${unitDir}/${layout.keeper_unit}.d
    (
      ${tacidLib.execStartDropInAll {
        unit = "${cfg.package}/${unitDir}/${layout.keeper_unit}";
        values = keeperValues;
      }}
    ) ${lib.optionalString (cfg.metrics.directory != null) "| sed -e ${lib.escapeShellArg "/^ExecStart=./s|$| --metrics-file ${metricsFile}|"}"} >$out/${unitDir}/${layout.keeper_unit}.d/${tacidLib.moduleDropIn}
    ${lib.optionalString (cfg.metrics.directory != null) ''
      echo ${lib.escapeShellArg "ReadWritePaths=-${cfg.metrics.directory}"} >>$out/${unitDir}/${layout.keeper_unit}.d/${tacidLib.moduleDropIn}
    ''}
    mkdir -p $out/${unitDir}/${layout.stem_unit}.d
    (
      ${tacidLib.execStartDropInAll {
        unit = "${cfg.package}/${unitDir}/${layout.stem_unit}";
        values = stemValues;
      }}
      ${lib.optionalString haveCut ''
        echo 'ExecStopPost='
        echo ${lib.escapeShellArg "ExecStopPost=-${bin "stem"} --thaw-cut --cut-config ${cutConfig}"}
      ''}
      ${lib.optionalString (cfg.device != layout.default_device) ''
        echo 'DeviceAllow=${cfg.device} rw'
        echo '[Unit]'
        echo 'Requires=${utils.escapeSystemdPath cfg.device}.device'
        echo 'After=${utils.escapeSystemdPath cfg.device}.device'
      ''}
    ) >$out/${unitDir}/${layout.stem_unit}.d/${tacidLib.moduleDropIn}
    ${lib.concatMapStringsSep "\n" (dropIn: "cp ${cfg.package}/${tacidLib.stemCopyDropInsDir}/${dropIn} $out/${unitDir}/${layout.stem_unit}.d/${dropIn}")
      (lib.optional haveCopies tacidLib.stemCopyDropIn ++ lib.optional haveSshCopies tacidLib.stemSshDropIn)}
    ${lib.optionalString haveCopies ''
      mkdir -p $out/${unitDir}/${layout.stem_receive_service_unit}.d
      (
        ${tacidLib.execStartDropInAll {
          unit = "${cfg.package}/${unitDir}/${layout.stem_receive_service_unit}";
          values = copiesValue;
        }}
        ${lib.concatMapStringsSep "\n" (place: "echo ${lib.escapeShellArg "ReadWritePaths=-${place}"}") localBtrfsPlaces}
      ) >$out/${unitDir}/${layout.stem_receive_service_unit}.d/${tacidLib.moduleDropIn}
    ''}
    ${lib.optionalString haveSealed ''
      mkdir -p $out/${unitDir}/${layout.copier_unit}.d
      (
        ${tacidLib.execStartDropInAll {
          unit = "${cfg.package}/${unitDir}/${layout.copier_unit}";
          values = copiesValue;
        }}
        ${lib.concatMapStringsSep "\n" (place: "echo ${lib.escapeShellArg "ReadWritePaths=-${place}"}") localSealedPlaces}
      ) >$out/${unitDir}/${layout.copier_unit}.d/${tacidLib.moduleDropIn}
    ''}
    # The notifier (a user unit, from the same systemd.packages) notifies the approvers the
    # keeper knows, not the shipped default's.
    mkdir -p $out/${userUnitDir}/${layout.notify_user_unit}.d
    (
      ${tacidLib.execStartDropInAll {
        unit = "${cfg.package}/${userUnitDir}/${layout.notify_user_unit}";
        values = [{ flag = "--group"; value = cfg.approverGroup; }];
      }}
    ) >$out/${userUnitDir}/${layout.notify_user_unit}.d/${tacidLib.moduleDropIn}
    ${lib.optionalString (cfg.alerts.command != null) ''
      mkdir -p $out/${unitDir}/${layout.alert_unit}.d
      (
        ${tacidLib.execStartDropInAll {
          unit = "${cfg.package}/${unitDir}/${layout.alert_unit}";
          values = [{ flag = "--command"; value = "${pkgs.writeShellScript "tacid-alert" cfg.alerts.command}"; }];
        }}
      ) >$out/${unitDir}/${layout.alert_unit}.d/${tacidLib.moduleDropIn}
    ''}
    ${lib.optionalString (!r.timeline) ''
      mkdir -p $out/${unitDir}/${layout.timeline_unit}.d
      (
        ${tacidLib.pruneOnlyDropIn { unit = "${cfg.package}/${unitDir}/${layout.timeline_unit}"; }}
      ) >$out/${unitDir}/${layout.timeline_unit}.d/${tacidLib.moduleDropIn}
    ''}
  '';

  # A retention count: a whole number, zero or more.
  count = default: description: lib.mkOption {
    type = lib.types.ints.unsigned;
    inherit default description;
  };

  restorablePaths = lib.concatMapStringsSep ", " (s: s.mount_point) tacidLib.restorableMounted;

  # Copies off the disk (adr/0018): root's configuration, one JSON file both daemons read,
  # in the store (root-owned, read-only), in exactly the format layout::copies parses.
  copies = cfg.copies;
  haveCopies = copies != { };
  isSsh = t: lib.hasPrefix "ssh://" t.target;
  # Sealed targets (adr/0024) are the copier's: the stem only sends into a pipe and
  # receives from one, so it needs the network only for an SSH target on Btrfs.
  isSealed = tacidLib.isSealedTarget;
  sealedCopies = lib.filterAttrs (_: isSealed) copies;
  haveSealed = sealedCopies != { };
  haveSshCopies = lib.any (t: isSsh t && !isSealed t) (lib.attrValues copies);
  haveSealedSsh = lib.any isSsh (lib.attrValues sealedCopies);
  # The copier's unit keeps the whole filesystem read-only but its state: each sealed
  # directory target is made writable for it, and nothing else.
  # The receiver (adr/0025) keeps the whole filesystem read-only but the store's .incoming:
  # each local Btrfs target's directory is made writable for it, and nothing else.
  localBtrfsPlaces = map (t: t.target) (lib.filter (t: lib.hasPrefix "/" t.target && !isSealed t) (lib.attrValues copies));
  localSealedPlaces = map (t: t.target) (lib.filter (t: lib.hasPrefix "/" t.target) (lib.attrValues sealedCopies));
  # A target's health thresholds from its timers' schedules (adr/0028): the global ones
  # (services.tacid.health.*) are a daily timer's; another of systemd's shorthands gets two
  # of its periods and an hour to warn, three (at least the global failure) to fail.
  schedulePeriod = {
    hourly = 3600;
    daily = 86400;
    weekly = 604800;
    monthly = 2678400;
  };
  targetHealth = t:
    let
      copyPeriod = schedulePeriod.${t.schedule} or null;
      verifyPeriod = if isSealed t && t.seal.verifySchedule != null then schedulePeriod.${t.seal.verifySchedule} or null else null;
      warn = p: 2 * p + 3600;
      copy = lib.optionalAttrs (copyPeriod != null && t.schedule != "daily") {
        copy_warn_secs = warn copyPeriod;
        copy_fail_secs = lib.max hc.copyFailSeconds (lib.max (3 * copyPeriod) (warn copyPeriod + 1));
      };
      verify = lib.optionalAttrs (verifyPeriod != null && t.seal.verifySchedule != "weekly") {
        verify_warn_secs = warn verifyPeriod;
      };
    in
    lib.optionalAttrs (copy != { })
      {
        health = copy // verify;
      } // lib.optionalAttrs (copy == { } && verify != { }) {
      health = { copy_warn_secs = hc.copyWarnSeconds; copy_fail_secs = hc.copyFailSeconds; } // verify;
    };
  copiesConfig = pkgs.writeText "tacid-copies.json" (builtins.toJSON {
    targets = lib.mapAttrs
      (_: t: {
        place = t.target;
        keep = { inherit (t.keep) latest daily weekly monthly; };
      }
      // targetHealth t
      // lib.optionalAttrs (t.identityFile != null) { identity = t.identityFile; }
      // lib.optionalAttrs (t.hostKey != null) { host_key = t.hostKey; }
      // lib.optionalAttrs (isSealed t) {
        seal = {
          inherit (t.seal) region http;
          full_every = t.seal.fullEvery;
          full_past_bytes = t.seal.fullPastBytes;
        } // lib.optionalAttrs (t.seal.credentialsFile != null) { credentials = t.seal.credentialsFile; };
      })
      copies;
  });
  verifiedCopies = lib.filterAttrs (_: t: t.seal.verifySchedule != null) sealedCopies;
  copiesValue = lib.optional haveCopies { flag = "--copies-config"; value = "${copiesConfig}"; };

  # A consistent cut (adr/0026): root's units paused while a set is taken, one JSON file the
  # stem reads, in exactly the format layout::cut parses; and thawed again by the stem's
  # ExecStopPost=, however it stopped.
  cut = cfg.consistentCut;
  haveCut = cut.units != [ ];
  # A hook's user: as given, else the service's own User= where the module sets one.
  hookUser = unitName: h:
    if h.user != null then h.user
    else
      let svc = lib.removeSuffix ".service" unitName;
      in if lib.hasSuffix ".service" unitName
      then (config.systemd.services.${svc}.serviceConfig.User or null)
      else null;
  cutHooks = lib.mapAttrsToList
    (unitName: h: {
      unit = unitName;
      user = hookUser unitName h;
      before_limit_ms = h.beforeLimitMs;
      after_limit_ms = h.afterLimitMs;
    } // lib.optionalAttrs (h.before != null) { inherit (h) before; }
    // lib.optionalAttrs (h.after != null) { inherit (h) after; })
    cut.hooks;
  cutConfig = pkgs.writeText "tacid-cut.json" (builtins.toJSON ({
    inherit (cut) units;
    freeze_timeout_ms = cut.freezeTimeoutMs;
    hold_limit_ms = cut.holdLimitMs;
  } // lib.optionalAttrs (cut.hooks != { }) { hooks = cutHooks; }));
  cutValue = lib.optional haveCut { flag = "--cut-config"; value = "${cutConfig}"; };
  cutOpt = "services.tacid.consistentCut";
  cutAssertions = map
    (u: {
      assertion = builtins.match layout.cut_unit_name_pattern u != null && builtins.stringLength u <= 255;
      message = "${cutOpt}.units: ${builtins.toJSON u} is not the name of a unit with processes of its own: it must be a systemd unit name (letters, digits, `:-_.\\`, `name@instance` for an instance) ending in .service, .scope or .slice, at most 255 bytes. Name the unit as `systemctl status` shows it.";
    })
    cut.units
  ++ [
    {
      assertion = lib.length cut.units <= layout.cut_max_units;
      message = "${cutOpt}.units: ${toString (lib.length cut.units)} units; at most ${toString layout.cut_max_units} may be paused around a set.";
    }
    {
      assertion = lib.length (lib.unique cut.units) == lib.length cut.units;
      message = "${cutOpt}.units names a unit twice; name each once.";
    }
    {
      assertion = cut.holdLimitMs >= cut.freezeTimeoutMs;
      message = "${cutOpt}.holdLimitMs (${toString cut.holdLimitMs}) is below freezeTimeoutMs (${toString cut.freezeTimeoutMs}): the units would be thawed before they could all be frozen. Raise holdLimitMs.";
    }
  ]
  ++ lib.concatMap
    (h:
      let
        at = "${cutOpt}.hooks.${builtins.toJSON h.unit}";
        argvOk = argv: argv == null || (argv != [ ]
          && lib.length argv <= layout.cut_max_hook_args
          && lib.hasPrefix "/" (lib.head argv));
        raw = cut.hooks.${h.unit};
      in
      [
        {
          assertion = lib.elem h.unit cut.units;
          message = "${at}: ${h.unit} is not in ${cutOpt}.units; a hook runs only for a unit that is paused. Add it there.";
        }
        {
          assertion = h.user != null;
          message = "${at}.user is not set and systemd.services gives ${h.unit} no User= to take it from: name the user the hook runs as (never root).";
        }
        {
          assertion = h.user == null
            || (builtins.match layout.cut_hook_user_pattern h.user != null
            && builtins.stringLength h.user <= 32 && h.user != "root");
          message = "${at}.user: ${builtins.toJSON h.user} is not a user a hook may run as: a user name (lower-case letters, digits, `_-`), never root. Name the unit's own user.";
        }
        {
          assertion = raw.before != null || raw.after != null;
          message = "${at}: neither before nor after is set; give a command or remove the hook.";
        }
        {
          assertion = argvOk raw.before && argvOk raw.after;
          message = "${at}: before and after are each a command as a list (program first, by absolute path, e.g. [ \"/run/current-system/sw/bin/psql\" \"-c\" \"CHECKPOINT\" ]), at most ${toString layout.cut_max_hook_args} words; no shell runs them.";
        }
      ])
    cutHooks;
in
{
  options.services.tacid = {
    enable = lib.mkEnableOption ''
      tacid: snapshots of ${restorablePaths} on one Btrfs filesystem, any of which can be
      put back at the next boot; a snapshot set before every switch; an ephemeral root'';

    package = lib.mkOption {
      type = lib.types.package;
      # Built with this machine's package set, so it is the package for this machine's
      # system whatever system evaluates the flake.
      default = pkgs.callPackage ./package.nix { };
      defaultText = lib.literalExpression "pkgs.callPackage <tacid>/nixos-modules/package.nix { }";
      description = ''
        The tacid package (daemons, CLI, initrd binary, units and D-Bus files). By default
        this repository's package, built with the machine's own nixpkgs.
      '';
    };

    ephemeralRoot = lib.mkOption {
      type = lib.types.bool;
      default = true;
      description = ''
        Make the root subvolume (${layout.root_subvolume}) again from its empty template
        (${layout.root_blank_subvolume}) at every boot, so that only what is kept on
        ${lib.concatMapStringsSep ", " (s: s.mount_point) (lib.filter (s: s.mount_point != "/") tacidLib.mounted)}
        outlives a reboot. False: the root is kept as it is (the initrd has no wipe unit,
        and ${layout.root_blank_subvolume} is not needed); snapshots, restores at boot,
        pre-switch sets, copies and opens work the same.
      '';
    };

    persistEssentials =
      let
        keep = default: what: lib.mkOption {
          type = lib.types.bool;
          inherit default;
          description = ''
            With the ephemeral root: keep ${what} on ${tacidLib.persistDir} across boots.
          '';
        };
      in
      {
        nixosIds = keep true "/var/lib/nixos (the uid and gid map NixOS keeps, so that ids do not move under files on ${tacidLib.persistDir} and /home), as a bind mount made in the initrd";
        systemdState = keep true "/var/lib/systemd (timer stamps, the random seed), as a bind mount made in the initrd";
        machineId = keep true "/etc/machine-id (the journal's and DHCP's identity of the machine), copied in by the initrd and back when it changes";
        sshHostKeys = keep true "the SSH host keys (services.openssh.hostKeys: those on the root, /etc/ssh by default), copied in by the initrd and back when they change";
        users = lib.mkOption {
          type = lib.types.bool;
          default = config.users.mutableUsers;
          defaultText = lib.literalExpression "config.users.mutableUsers";
          description = ''
            With the ephemeral root: keep /etc/passwd, /etc/group, /etc/shadow and
            /etc/gshadow on ${tacidLib.persistDir} across boots (copied in by the initrd
            before activation, and back whenever they change), so that passwords set
            with `passwd` and users added by hand survive a reboot. Off with
            `users.mutableUsers = false`, where the configuration declares them all.
            With userborn keeping them elsewhere (`services.userborn.passwordFilesLocation`,
            not /etc), there is nothing to copy: they are kept with that directory
            (/var/lib/nixos: `nixosIds`).
          '';
        };
      };

    device = lib.mkOption {
      # A device path: it goes onto the stem's and the initrd's command lines.
      type = lib.types.strMatching "/dev/[A-Za-z0-9_./:+=@-]+";
      default = layout.default_device;
      example = "/dev/disk/by-uuid/0a1b2c3d-0000-0000-0000-000000000000";
      description = ''
        The Btrfs filesystem holding the tacid layout. Every mount of the layout uses it;
        when it is not the default, the initrd is told on the kernel command line and the
        stem by a drop-in. The filesystem must carry the label
        "${layout.filesystem_label}" all the same (`scripts/make-disk-layout.sh` sets it):
        the stem's unit waits for that label's device.
      '';
    };

    approverGroup = lib.mkOption {
      # A plain group name: it goes onto the keeper's command line.
      type = lib.types.strMatching "[A-Za-z_][A-Za-z0-9_-]*";
      default = d.approver_group;
      description = ''
        Members of this group may take snapshots and stage restores through `tacid`;
        root always may. A restore deletes everything written since its snapshot, so
        choose the group accordingly.
      '';
    };

    preSwitchSnapshot = {
      enable = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          Take a snapshot set before every switch to a new configuration
          (`nixos-rebuild switch|boot|test`, or `switch-to-configuration` run directly),
          through `system.preSwitchChecks`. If the snapshot fails, the switch stops;
          `touch ${skipFile}` as root lets the next switch through once without one.
        '';
      };

      subvolumes = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = tacidLib.snapshotByDefault;
        defaultText = lib.literalExpression "[ ${lib.concatMapStringsSep " " (n: "\"${n}\"") tacidLib.snapshotByDefault} ]";
        description = ''
          The subvolumes in the snapshot set taken before a switch. These can be
          snapshotted: ${lib.concatStringsSep ", " tacidLib.snapshottable}.
        '';
      };
    };

    # Retention (adr/0013): the keeper applies these rules in `tacid data prune` (run every
    # hour by the timeline timer) and the free-space floor also before every snapshot; the
    # stem refuses snapshots below the hard floor.
    retention = {
      preSwitchSets = count d.keep_pre_switch_sets ''
        How many of the newest pre-switch snapshot sets are kept; older sets are deleted
        by `tacid data prune`, each set whole.
      '';
      hourly = count d.keep_hourly ''
        Timeline sets (`tacid data snapshot --timeline`): keep the newest of each of the
        last this many hours that have one.
      '';
      daily = count d.keep_daily "Likewise for days (UTC).";
      weekly = count d.keep_weekly "Likewise for weeks (Monday to Sunday, UTC).";
      monthly = count d.keep_monthly "Likewise for months (UTC).";
      manualMaxAgeDays = count d.manual_max_age_days ''
        Manual snapshots older than this many days are deleted by `tacid data prune`;
        0 keeps them until a person deletes them.
      '';
      freeFloorBytes = count d.free_floor_bytes ''
        Below this many free bytes, the oldest automatic snapshot set (pre-switch or
        timeline) is deleted as well, one set per round: before every snapshot and at
        every `tacid data prune`. Never a manual one, one a person marked to keep, or one
        a staged restore names. 0: no floor.
      '';
      timeline = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          Take a timeline snapshot set every hour (${layout.timeline_timer}), then apply
          the retention rules (`tacid data prune`), also when the snapshot failed. Below
          the free-space floor, the timeline prunes before it snapshots. When false, the
          timer still runs every hour but only prunes, so the free-space floor is still
          checked on a timer; and health (`tacid data health`) expects no hourly set: the
          age of the newest snapshot is no warning, having none is.
        '';
      };
      hardFloorBytes = count d.hard_floor_bytes ''
        Below this many free bytes, the stem refuses to take a snapshot (the error says
        so and nothing is made), rather than fill the disk; and the initrd deletes what a
        restore replaces instead of keeping it for an undo (the restore's preview says so
        in advance). 0: no hard floor.
      '';
      keepReplacedDays = count d.keep_replaced_days ''
        What a restore replaced (kept read-only in the store by the boot that did the
        restore, so that `tacid data restore` of it undoes the restore) is kept this many
        days after that boot, then deleted by `tacid data prune`. It counts against no
        other rule, and the free-space floor never takes it early. At most 36500.
      '';
    };

    # Opening a snapshot read-only for a person (adr/0019, adr/0020): `tacid data open`.
    open = {
      idleSeconds = count d.open_idle_secs ''
        An open snapshot (`tacid data open`) is closed this many seconds after it was last
        opened, once nothing uses it; while something does, it stays open (adr/0021).
      '';
      perUser = count d.opens_per_user "How many snapshots one person may have open at once.";
      total = count d.opens_total "How many snapshots may be open at once, everybody together.";
    };

    # Health, alerts and metrics (adr/0028): `tacid data health`.
    health = {
      snapshotWarnSeconds = count d.health_snapshot_warn_secs ''
        The newest snapshot of a subvolume older than this many seconds is a warning
        (`tacid data health` exits 16, and the keeper signals it). The default is two
        periods of the hourly timeline timer and its delay.
      '';
      snapshotFailSeconds = count d.health_snapshot_fail_secs "Older than this many seconds is a failure (exit code 17).";
      copyWarnSeconds = count d.health_copy_warn_secs ''
        The newest copy of a subvolume on a copy target older than this many seconds is a
        warning (two periods of a daily target's timer and an hour).
      '';
      copyFailSeconds = count d.health_copy_fail_secs "Older than this many seconds is a failure.";
      verifyWarnSeconds = count d.health_verify_warn_secs "A sealed target whose copies were last verified longer ago than this many seconds is a warning (two periods of a weekly verify timer and an hour).";
      stagedWaitSeconds = count d.health_staged_wait_secs "A restore staged and waiting for a reboot longer than this many seconds is a warning.";
      daysLeftWarn = count d.health_days_left_warn "Fewer days than this until the free space reaches the hard floor, at the rate it fell recently: a warning.";
      daysLeftFail = count d.health_days_left_fail "Fewer days than this: a failure.";
    };

    alerts = {
      command = lib.mkOption {
        type = lib.types.nullOr lib.types.lines;
        default = null;
        example = "''${pkgs.mailutils}/bin/mail -s \"tacid on $(hostname): $TACID_ALERT_UNIT failed\" root";
        description = ''
          A shell script run as root when a tacid timer's unit fails, the hourly health
          check's (${layout.health_unit}) when health warns or fails (its OnFailure= starts
          ${layout.alert_unit}), with the `tacid data health` report on its standard
          input and TACID_ALERT_UNIT and TACID_HEALTH_LEVEL in its environment: mail, a push
          service. The failure is journalled at warning priority either way. The alert unit's
          drop-in names it in place of ${layout.alert_command_path}.
        '';
      };
      notify = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          Start ${layout.notify_user_unit} (`tacid notify`) in every graphical session: the
          keeper's alerts (health worsened, a timer's act failed) as desktop notifications,
          for root and the approver group; anybody else's ends at once.
        '';
      };
    };

    metrics.directory = lib.mkOption {
      type = lib.types.nullOr lib.types.str;
      default = null;
      example = "/var/lib/prometheus-node-exporter-text-files";
      description = ''
        node_exporter's textfile directory (services.prometheus.exporters.node with the
        textfile collector's --collector.textfile.directory): after every run of a tacid
        timer (the timeline, each copy and verification), `tacid data health` writes
        tacid.prom there, and the keeper writes it after every scheduled act and every
        few minutes (an ACL lets its user write in the directory). null: no metrics.
      '';
    };

    # A consistent cut (adr/0026).
    consistentCut = {
      units = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ ];
        example = [ "postgresql.service" ];
        description = ''
          Units whose processes write to the snapshotted subvolumes (a database with its
          data on /persist and its log on /var/log). Before every snapshot set, on request,
          on the timeline and before a switch, the stem pauses them (systemd's FreezeUnit:
          their cgroups frozen), takes every member, and thaws them: the set is one moment of
          what they wrote, and `tacid data list` says so. A unit that does not freeze within
          freezeTimeoutMs means no set is taken (the switch or timer is told which unit);
          a unit that is not running is left out. Each must be a .service, .scope or
          .slice.
        '';
      };
      freezeTimeoutMs = lib.mkOption {
        type = lib.types.ints.between 1 layout.cut_max_limit_ms;
        default = d.cut_freeze_timeout_ms;
        description = "How long the stem waits for every unit to report frozen before it takes no set and thaws them.";
      };
      holdLimitMs = lib.mkOption {
        type = lib.types.ints.between 1 layout.cut_max_limit_ms;
        default = d.cut_hold_limit_ms;
        description = ''
          How long the units may stay frozen in all: past it, a guard process thaws them
          whatever the stem is doing, and the set is not kept.
        '';
      };
      hooks = lib.mkOption {
        default = { };
        example = lib.literalExpression ''
          {
            "postgresql.service".before =
              [ "''${config.services.postgresql.package}/bin/psql" "-c" "CHECKPOINT" ];
          }
        '';
        description = ''
          Commands for a paused unit where a pause alone is not enough (adr/0026), by the
          unit's name (one of `units`): `before` runs before anything is frozen (a
          database's checkpoint), `after` once everything is thawed. Each runs as `user`
          (by default the service's own `serviceConfig.User`; never root), with that user's
          groups, no shell, an environment of its own and `/` as its directory, as a
          transient systemd service; its output goes to the journal. A `before` that fails
          or outlives its limit means no set is taken; an `after` that fails is reported
          with the set, which stands.
        '';
        type = lib.types.attrsOf (lib.types.submodule {
          options = {
            user = lib.mkOption {
              type = lib.types.nullOr lib.types.str;
              default = null;
              description = "Who the commands run as; null: the service's `serviceConfig.User`.";
            };
            before = lib.mkOption {
              type = lib.types.nullOr (lib.types.listOf lib.types.str);
              default = null;
              description = "The command run before the freeze: the program (absolute path) and its arguments.";
            };
            after = lib.mkOption {
              type = lib.types.nullOr (lib.types.listOf lib.types.str);
              default = null;
              description = "The command run after the thaw: the program (absolute path) and its arguments.";
            };
            beforeLimitMs = lib.mkOption {
              type = lib.types.ints.between 1 layout.cut_max_hook_limit_ms;
              default = d.cut_hook_limit_ms;
              description = "How long `before` may run before it is killed (and no set is taken).";
            };
            afterLimitMs = lib.mkOption {
              type = lib.types.ints.between 1 layout.cut_max_hook_limit_ms;
              default = d.cut_hook_limit_ms;
              description = "How long `after` may run before it is killed.";
            };
          };
        });
      };
    };

    copies = lib.mkOption {
      default = { };
      example = lib.literalExpression ''
        {
          usb.target = "/mnt/backup/tacid";
          offsite = {
            target = "ssh://root@backup.example.org/srv/tacid/''${config.networking.hostName}";
            identityFile = "/etc/tacid/copy-key";
            hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI...";
            schedule = "daily";
          };
        }
      '';
      description = ''
        Targets that hold copies of the snapshots off this disk (a snapshot alone dies with
        the disk). Each name is a target `tacid data copy NAME --to TARGET` and
        `tacid data fetch NAME --from TARGET` accept; callers name a target only by its name
        here, never by a path or a host. A timer per target copies the newest snapshot of
        each snapshotted subvolume there and applies the target's own retention
        (docs/nixos.md, adr/0018).
      '';
      type = lib.types.attrsOf (lib.types.submodule {
        options = {
          target = lib.mkOption {
            type = lib.types.strMatching layout.copy_place_pattern;
            example = "ssh://root@backup.example.org:22/srv/tacid/laptop";
            description = ''
              Where the copies go: a directory on another mounted Btrfs (an absolute
              path), or `ssh://[user@]host[:port]/path` on a host that runs
              `tacid-copy-target` as the forced command of the key (copies/README.md).
            '';
          };
          identityFile = lib.mkOption {
            # A path on the machine, not a store path: the key is a secret.
            type = lib.types.nullOr (lib.types.strMatching "/.+");
            default = null;
            description = "For an SSH target: the private key the stem uses (root-only, never in the store).";
          };
          hostKey = lib.mkOption {
            type = lib.types.nullOr (lib.types.strMatching "[a-z0-9@.-]+ [A-Za-z0-9+/]+=*");
            default = null;
            example = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI...";
            description = "For an SSH target: the host's public key, pinned (no other key is accepted).";
          };
          schedule = lib.mkOption {
            type = lib.types.str;
            default = "daily";
            description = "When the target's timer copies (systemd.time(7) calendar event).";
          };
          seal = {
            enable = lib.mkOption {
              type = lib.types.bool;
              default = false;
              description = ''
                Seal the copies (adr/0024): the send stream compressed, encrypted and
                authenticated by the unprivileged copier (${layout.copier_unit}), in parts under
                a manifest, so that the target may be any filesystem (a directory), an SSH host
                without Btrfs, or S3, and need not be trusted. An `s3://` target is always
                sealed. The copier's key is made once by `tacid-copier key init` (run as root);
                it prints the recovery key, which with the target's address is all a new
                machine needs to fetch a copy back.
              '';
            };
            credentialsFile = lib.mkOption {
              # A path on the machine, not a store path: the credentials are a secret.
              type = lib.types.nullOr (lib.types.strMatching "/.+");
              default = null;
              example = "/var/lib/tacid-copier/cloud.credentials";
              description = ''
                For an `s3://` target: a JSON file `{"access_key_id": …, "secret_access_key": …}`
                owned by ${layout.copier_user}, mode 0400 (never in the store).
              '';
            };
            region = lib.mkOption {
              type = lib.types.str;
              default = "garage";
              description = "For an `s3://` target: the region the store signs requests for.";
            };
            http = lib.mkOption {
              type = lib.types.bool;
              default = false;
              description = "For an `s3://` target: plain HTTP (a store on this host or a trusted network); the copies are sealed either way, the credentials are not.";
            };
            fullEvery = lib.mkOption {
              type = lib.types.ints.positive;
              default = d.seal_full_every;
              description = "A full copy every this many copies: a chain holds at most this many copies, its full copy counted (2: full, incremental, full, …; 1: every copy full), so that a fetch replays at most this many streams.";
            };
            fullPastBytes = lib.mkOption {
              type = lib.types.nullOr lib.types.ints.unsigned;
              default = null;
              description = "A full copy once the incrementals since the last full add up to more than this many stored bytes (null: more than the full copy itself).";
            };
            verifySchedule = lib.mkOption {
              type = lib.types.nullOr lib.types.str;
              default = "weekly";
              description = "When a timer reads every sealed copy on the target back and checks it without restoring (`tacid data verify --target`; systemd.time(7)); null for no timer.";
            };
          };
          keep = {
            latest = count d.keep_copies_latest "Copies on the target: the newest this many of each subvolume stay.";
            daily = count d.keep_copies_daily "Likewise the newest of each of the last this many days (UTC).";
            weekly = count d.keep_copies_weekly "Likewise for weeks.";
            monthly = count d.keep_copies_monthly "Likewise for months.";
          };
        };
      });
    };

    copiesConfigFile = lib.mkOption {
      type = lib.types.nullOr lib.types.package;
      default = if haveCopies then copiesConfig else null;
      defaultText = lib.literalMD "the copies file, when `copies` names a target";
      readOnly = true;
      internal = true;
      description = "The copies configuration both daemons read (null without copies).";
    };

    cutConfigFile = lib.mkOption {
      type = lib.types.nullOr lib.types.package;
      default = if haveCut then cutConfig else null;
      defaultText = lib.literalMD "the consistent-cut file, when `consistentCut.units` names a unit";
      readOnly = true;
      internal = true;
      description = "The consistent-cut configuration the stem reads (null without units).";
    };

    fileSystems = lib.mkOption {
      type = lib.types.attrs;
      readOnly = true;
      internal = true;
      description = ''
        The mounts of the tacid layout, as this module declares them under `fileSystems`;
        for configurations that replace `fileSystems` wholesale, such as NixOS VM tests.
      '';
    };
  };

  config = lib.mkMerge [
    # Defined, empty, where tacid is not enabled: reading services.tacid there must not
    # throw (older libs throw for an option nobody defined).
    {
      services.tacid.fileSystems = lib.optionalAttrs cfg.enable (tacidLib.fileSystemsFor cfg.device
        // lib.genAttrs keptDirs (dir: {
        device = tacidLib.persistedPath dir;
        fsType = "none";
        options = [ "bind" ];
        depends = [ tacidLib.persistDir ];
        # Mounted in the initrd, before activation reads the uid map.
        neededForBoot = true;
      }));
    }
    (lib.mkIf cfg.enable {
      assertions = tacidLib.assertionsFor
        {
          inherit (cfg) device approverGroup;
          initrdSystemd = config.boot.initrd.systemd.enable;
          inherit (config) fileSystems;
          groups = builtins.attrNames config.users.groups;
          preSwitchSubvolumes = cfg.preSwitchSnapshot.subvolumes;
          inherit copies;
        }
      ++ cutAssertions
      ++ tacidLib.persistenceAssertions {
        inherit persistence keptByTacid;
        inherit (config) fileSystems;
        ephemeralRoot = ephemeral;
      }
      ++ [
        # Nothing here may quietly make a machine that never snapshots (adr/0028): what can
        # be known at evaluation is asserted; the first `tacid data health` after boot warns
        # about the rest (no snapshot yet, a timer that has not run).
        {
          assertion = config.systemd.timers.${tacidLib.timerAttrName layout.timeline_timer}.enable or true;
          message = "services.tacid: systemd.timers.${tacidLib.timerAttrName layout.timeline_timer}.enable = false leaves this machine without timeline snapshots and without the hourly free-space check; nothing would say so but `tacid data health`. Remove that setting; to keep only pre-switch sets, set services.tacid.retention.timeline = false (the timer then only prunes).";
        }
        {
          assertion = config.systemd.services.${tacidLib.serviceAttrName layout.timeline_unit}.enable or true;
          message = "services.tacid: systemd.services.${tacidLib.serviceAttrName layout.timeline_unit}.enable = false: the timeline timer would start nothing, and no snapshot would be taken. Remove that setting; to keep only pre-switch sets, set services.tacid.retention.timeline = false.";
        }
        {
          assertion = hc.snapshotWarnSeconds < hc.snapshotFailSeconds && hc.copyWarnSeconds < hc.copyFailSeconds && hc.daysLeftFail < hc.daysLeftWarn;
          message = "services.tacid.health: each warning must come before its failure: snapshotWarnSeconds < snapshotFailSeconds, copyWarnSeconds < copyFailSeconds, daysLeftFail < daysLeftWarn.";
        }
        {
          assertion = hc.snapshotWarnSeconds >= 3600;
          message = "services.tacid.health.snapshotWarnSeconds: below one period of the hourly timeline timer (3600), health would warn between every two runs. Set it to 3600 or more (default ${toString d.health_snapshot_warn_secs}).";
        }
        {
          assertion = cfg.metrics.directory == null || lib.hasPrefix "/" cfg.metrics.directory;
          message = "services.tacid.metrics.directory: \"${toString cfg.metrics.directory}\" is not an absolute path; give node_exporter's textfile directory, e.g. /var/lib/prometheus-node-exporter-text-files.";
        }
        {
          assertion = !immutableEtc || keptInEtc == [ ];
          message = "services.tacid: system.etc.overlay.mutable = false makes /etc read-only, so the initrd cannot copy ${lib.concatMapStringsSep ", " (x: x.path) keptInEtc} into it from ${tacidLib.persistDir}. Set ${lib.concatMapStringsSep " and " (o: "services.tacid.persistEssentials.${o} = false;") (lib.unique (map (x: x.option) keptInEtc))} and keep them outside /etc (services.openssh.hostKeys with paths on ${tacidLib.persistDir}; services.userborn.passwordFilesLocation; the machine id as environment.etc.\"machine-id\".text), or set system.etc.overlay.mutable = true;";
        }
        {
          assertion = !(ephemeral && config.users.mutableUsers && !essentials.users)
            || config.users.allowNoPasswordLogin || (config.security.googleOsLogin.enable or false)
            || tacidLib.declaredWayIn config.users.users;
          message = "services.tacid: the root is made again at every boot (services.tacid.ephemeralRoot), and with users.mutableUsers = true and services.tacid.persistEssentials.users = false nothing keeps /etc/shadow: a password set with passwd is gone after the next reboot, and neither root nor any wheel user has a password or an SSH key in the configuration, so nobody could log in. Set services.tacid.persistEssentials.users = true; or give root or a wheel user one in the configuration: users.users.<name>.hashedPasswordFile (a file on ${tacidLib.persistDir}), hashedPassword, or openssh.authorizedKeys.keys. If nobody is to log in, set users.allowNoPasswordLogin = true;";
        }
      ];

      # Device, type and neededForBoot as defaults, so a conflicting definition elsewhere
      # (hardware-configuration.nix) reaches the assertions above, which say what to do,
      # instead of a bare "conflicting definition values". Options merge: add your own
      # (compress=zstd, noatime) next to the subvolume.
      fileSystems = lib.mapAttrs
        (_: fs: (lib.mapAttrs (_: lib.mkDefault) (removeAttrs fs [ "options" ])) // { inherit (fs) options; })
        cfg.fileSystems;

      boot.kernelParams = tacidLib.kernelParamsFor cfg.device
        ++ tacidLib.hardFloorParamsFor cfg.retention.hardFloorBytes;

      # The initrd honours a staged restore, then makes the root again from its blank
      # template; both before the root is mounted. The units are the package's files.
      boot.initrd.systemd = {
        extraBin.${shipped.binaries.initrd.name} = bin "initrd";
        packages = [ initrdUnits ];
        storePaths = [ "${initrdUnits}" ];
        services = lib.mkMerge [
          (lib.mapAttrs (_: unit: unit // { before = beforeInitrdUnits; })
            (tacidLib.wantedByFor (lib.filter (e: lib.elem (tacidLib.fileName e) ourInitrdUnits) tacidLib.enabledInitrdUnits)))
          # The essentials into the new root, after the persistent subvolume is mounted
          # (and so after any restore of it), before the bind mounts from it and before
          # activation reads the users.
          (lib.mkIf (keptDirs != [ ] || keptFiles != [ ]) {
            ${persistEssentialsUnit} = {
              description = "tacid: what NixOS keeps on ${tacidLib.persistDir}, into the new root";
              wantedBy = [ "initrd.target" ];
              # Before initrd.target too: initrd-cleanup.service isolates
              # initrd-switch-root.target once initrd.target is reached, which stops a
              # service still copying.
              before = [ "initrd-nixos-activation.service" "initrd.target" ] ++ keptDirMountUnits;
              unitConfig = {
                DefaultDependencies = false;
                RequiresMountsFor = lib.concatStringsSep " " ([ "/sysroot${tacidLib.persistDir}" ] ++ keptFileDirs);
              };
              serviceConfig.Type = "oneshot";
              script = tacidLib.persistEssentialsInitrdScript { dirs = keptDirs; files = keptFiles; };
            };
          })
        ];
      };

      systemd.packages = [ cfg.package unitDropIns ];
      systemd.services = lib.mkMerge [
        (tacidLib.wantedByFor tacidLib.enabledSystemUnits)
        (lib.mkIf (keptDirs != [ ] || keptFiles != [ ]) {
          ${persistEssentialsUnit} = {
            description = "tacid: keep what NixOS needs across boots on ${tacidLib.persistDir}";
            # After sshd made its host keys (in its own start, or sshd-keygen.service when
            # it is socket-activated), and whenever either starts (sshd turned on by a
            # switch): a key made where none was is not seen by the path unit, which
            # watches files that exist, and the next boot would not have it.
            wantedBy = [ "multi-user.target" ] ++ sshUnits;
            after = sshUnits;
            unitConfig.RequiresMountsFor = tacidLib.persistDir;
            serviceConfig = {
              Type = "oneshot";
              ExecStart = "${saveEssentials}/bin/${persistEssentialsUnit}";
            };
          };
        })
        # The timeline's unit (the package's; OnFailure= the alert there) writes the metrics
        # after each run too, when asked.
        # So does the hourly health check's; their sandbox (ProtectSystem=strict) lets them
        # write in the directory and nowhere else.
        (lib.mkIf (cfg.metrics.directory != null) (lib.genAttrs
          (map tacidLib.serviceAttrName [ layout.timeline_unit layout.health_unit ])
          (_: {
            serviceConfig = {
              ExecStopPost = metricsStopPost;
              ReadWritePaths = [ "-${cfg.metrics.directory}" ];
            };
          })))
        # Every `btrfs receive` is the receiver's (adr/0025), one instance per connection;
        # the stem reaches SSH targets on Btrfs with ssh.
        (lib.mkIf haveCopies {
          ${tacidLib.serviceAttrName layout.stem_receive_service_unit}.path = [ pkgs.btrfs-progs ];
        })
        (lib.mkIf haveSshCopies {
          ${tacidLib.serviceAttrName layout.stem_unit}.path = [ pkgs.openssh ];
        })
        # The copier runs on machines with sealed targets, and reaches SSH ones with ssh.
        (lib.mkIf haveSealed {
          ${tacidLib.serviceAttrName layout.copier_unit} = {
            wantedBy = [ "multi-user.target" ];
            path = lib.optional haveSealedSsh pkgs.openssh;
          };
        })
        (lib.mapAttrs'
          (name: _: lib.nameValuePair (tacidLib.verifyUnitName name) {
            description = "tacid verifies the sealed copies on ${name} without restoring them";
            after = [ layout.keeper_unit ];
            onFailure = alertOnFailure;
            serviceConfig = {
              Type = "oneshot";
              ExecStart = "${bin "cli"} data verify --target ${name} --timer";
              ExecStopPost = metricsStopPost;
            };
          })
          verifiedCopies)
        (lib.mapAttrs'
          (name: _: lib.nameValuePair (tacidLib.copyUnitName name) {
            description = "tacid copies to ${name}, and the retention there";
            after = [ layout.keeper_unit ];
            onFailure = alertOnFailure;
            serviceConfig = {
              Type = "oneshot";
              ExecStart = "${bin "cli"} data copy --to ${name}";
              ExecStopPost = metricsStopPost;
            };
          })
          copies)
      ];
      # A person's notifier, in every graphical session (the package's user unit).
      systemd.user.services.${tacidLib.serviceAttrName layout.notify_user_unit}.wantedBy =
        lib.mkIf cfg.alerts.notify [ "graphical-session.target" ];
      # The receiver's socket, only where there are copies to receive.
      systemd.sockets = lib.mkIf haveCopies {
        ${lib.removeSuffix ".socket" layout.stem_receive_socket_unit}.wantedBy = [ "sockets.target" ];
      };
      # Always: with retention.timeline = false it only prunes (unitDropIns above).
      systemd.timers = lib.mkMerge [
        {
          ${tacidLib.timerAttrName layout.timeline_timer}.wantedBy = [ "timers.target" ];
          # Hourly health: alerts (OnFailure=) when it warns or fails, with no desktop.
          ${tacidLib.timerAttrName layout.health_timer}.wantedBy = [ "timers.target" ];
        }
        (lib.mapAttrs'
          (name: t: lib.nameValuePair (tacidLib.copyUnitName name) {
            wantedBy = [ "timers.target" ];
            timerConfig = {
              OnCalendar = t.schedule;
              Persistent = true;
              RandomizedDelaySec = "10min";
            };
          })
          copies)
        (lib.mapAttrs'
          (name: t: lib.nameValuePair (tacidLib.verifyUnitName name) {
            wantedBy = [ "timers.target" ];
            timerConfig = {
              OnCalendar = t.seal.verifySchedule;
              Persistent = true;
              RandomizedDelaySec = "30min";
            };
          })
          verifiedCopies)
      ];
      # The essentials back onto the persistent subvolume: once a boot (after activation
      # made them; systemd.services above), and whenever one changes (passwd, useradd, a
      # switch, sshd's first key).
      systemd.paths.${persistEssentialsUnit} = lib.mkIf (keptFiles != [ ]) {
        wantedBy = [ "paths.target" ];
        pathConfig.PathChanged = keptFiles;
      };

      services.dbus.packages = [ cfg.package ];
      # The CLI, and the essentials' save, which an installer runs once in the new system.
      environment.systemPackages = [ cfg.package ] ++ lib.optional (keptDirs != [ ] || keptFiles != [ ]) saveEssentials;

      users.users.${layout.keeper_user} = {
        isSystemUser = true;
        group = layout.keeper_user;
        description = "tacid keeper (consent, and the journal of snapshots and restores)";
      };
      users.groups.${layout.keeper_user} = { };

      users.users.${layout.copier_user} = lib.mkIf haveSealed {
        isSystemUser = true;
        group = layout.copier_user;
        description = "tacid copier (seals copies for storage that is not trusted; holds the sealing key)";
      };
      users.groups.${layout.copier_user} = lib.mkIf haveSealed { };

      systemd.tmpfiles.rules = tacidLib.tmpfilesRules ++ lib.optionals haveSealed tacidLib.copierTmpfilesRules
        ++ lib.optional (cfg.metrics.directory != null) "a+ ${cfg.metrics.directory} - - - - u:${layout.keeper_user}:rwx";

      system.preSwitchChecks.tacid = lib.mkIf cfg.preSwitchSnapshot.enable (
        tacidLib.preSwitchScript {
          tacid = "/run/current-system/sw/bin/${shipped.binaries.cli.name}";
          coreutils = "${pkgs.coreutils}";
          inherit skipFile;
          snapshotArgs = cfg.preSwitchSnapshot.subvolumes;
        }
      );
    })
  ];
}
