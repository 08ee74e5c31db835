# Evaluates nixos-modules/tacid.nix with nixpkgs' real module system and the upstream
# NixOS declarations of everything it sets (./nixos-eval.nix), forces every value it
# sets, and checks the configuration it produces:
#   nix-instantiate --eval --strict --json checks/nixos/eval-module.nix \
#     --arg nixpkgsLib ../shared/nixpkgs-lib/lib --arg nixosSubset ../shared/nixos-subset
# gives { checks = true; forced = [ the options it set ]; }, or fails with the check that
# did not hold (or the type error the module system found).
#
# `extraModule` is one more module in the evaluation; checks/nix-checks.sh uses it for
# the negative tests (a colon in the keeper's description, an option nothing declares).
{ nixpkgsLib ? ../../../shared/nixpkgs-lib/lib
, nixosSubset ? ../../../shared/nixos-subset
, extraModule ? { }
}:
let
  nixos = import ./nixos-eval.nix { inherit nixpkgsLib nixosSubset; };
  inherit (nixos) lib;
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout shipped;
  inherit (builtins) all attrNames elem filter head length map;

  check = what: ok: if ok then true else throw "eval-module: ${what}";

  tacidModule = ../../nixos-modules/tacid.nix;

  # A machine with tacid enabled, as the README tells a user to write it.
  machine = settings: nixos.eval {
    system = "x86_64-linux";
    modules = [
      tacidModule
      {
        services.tacid = { enable = true; } // settings;
        boot.initrd.systemd.enable = true;
      }
      extraModule
    ];
  };

  good = machine { };
  c = good.config;
  options = good.options.services.tacid;
  other = (machine { device = "/dev/vdb"; }).config;
  noTimeline = (machine { retention.timeline = false; }).config;

  # A machine with tacid and `extra` besides (a module), as people write it.
  machineWith = settings: extra: nixos.eval {
    system = "x86_64-linux";
    modules = [
      tacidModule
      {
        services.tacid = { enable = true; } // settings;
        boot.initrd.systemd.enable = true;
      }
      extra
    ];
  };
  failingWith = settings: extra: failing (machineWith settings extra).config;

  # The root kept as it is: no wipe, the rest the same.
  keptRoot = (machine { ephemeralRoot = false; }).config;
  wipeAttr = unitAttr layout.initrd_wipe_root_unit;
  restoreAttr = unitAttr layout.initrd_restore_unit;
  initrdUnitsScript = config: (builtins.head config.boot.initrd.systemd.packages).script;

  # A machine without tacid: its services.tacid can still be read, all of it.
  # Every option of it defined: the lib here falls back to a type's empty value for an
  # option nobody defined, but older libs throw there.
  withoutTacidEval = nixos.eval {
    system = "x86_64-linux";
    modules = [ tacidModule { boot.initrd.systemd.enable = true; } ];
  };
  withoutTacid = withoutTacidEval.config;

  # The essentials kept on the persistent subvolume (adr/0022).
  persistDir = tacidLib.persistDir;
  essentialsUnit = "tacid-persist-essentials";
  initrdUnitText = config: name: config.boot.initrd.systemd.units.${name}.text;
  pathChanged = config: config.systemd.paths.${essentialsUnit}.pathConfig.PathChanged;
  keptFilesOf = config: if config.systemd.paths ? ${essentialsUnit} then pathChanged config else [ ];
  noUsersKept = machine { persistEssentials.users = false; };

  # Copies off the disk (adr/0018): a local and an SSH target.
  withCopies = (machine {
    copies = {
      usb.target = "/mnt/backup/tacid";
      offsite = {
        target = "ssh://root@backup.example.org:2222/srv/tacid/laptop";
        identityFile = "/etc/tacid/copy-key";
        hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
        schedule = "hourly";
        keep.latest = 5;
      };
    };
  }).config;
  onlyLocalCopies = (machine { copies.usb.target = "/mnt/backup/tacid"; }).config;
  # Sealed copies (adr/0024): a directory on any filesystem and an SSH host without Btrfs.
  hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
  withSealed = (machine {
    copies = {
      usb = { target = "/mnt/usb/tacid"; seal.enable = true; };
      nas = {
        target = "ssh://tacid@nas.example.org/srv/tacid";
        identityFile = "/var/lib/tacid-copier/ssh/id_ed25519";
        inherit hostKey;
        seal = { enable = true; fullEvery = 7; verifySchedule = null; };
      };
    };
  }).config;
  withS3 = (machine {
    copies.cloud = {
      target = "s3://127.0.0.1:3900/tacid-bucket/laptop";
      seal = { credentialsFile = "/var/lib/tacid-copier/cloud.credentials"; http = true; };
    };
  }).config;
  copierAttr = unitAttr layout.copier_unit;
  verifyUnit = tacidLib.verifyUnitName;
  copyUnit = tacidLib.copyUnitName;
  # The JSON the module hands both daemons, read back from the file it wrote.
  copiesJson = config: builtins.fromJSON config.services.tacid.copiesConfigFile.text;
  copiesProblems = settings: failing (machine { copies = settings; }).config;
  withCut = (machine { consistentCut.units = [ "postgresql.service" "app@blue.service" ]; }).config;
  cutJson = config: builtins.fromJSON config.services.tacid.cutConfigFile.text;
  cutProblems = settings: failing (machine { consistentCut = settings; }).config;
  namesCutOption = settings: lib.any (hasInfix "services.tacid.consistentCut") (cutProblems settings);
  # Hooks: the user from the service's own User= when not given.
  withHooks = (machineWith
    {
      consistentCut = {
        units = [ "postgresql.service" "app.scope" ];
        hooks."postgresql.service" = {
          before = [ "/run/current-system/sw/bin/psql" "-c" "CHECKPOINT" ];
          beforeLimitMs = 5000;
        };
        hooks."app.scope" = { user = "app"; after = [ "/bin/app-resume" ]; };
      };
    }
    { systemd.services.postgresql.serviceConfig.User = "postgres"; }).config;
  hookProblems = hooks: failingWith
    { consistentCut = { units = [ "postgresql.service" "app.scope" ]; inherit hooks; }; }
    { systemd.services.postgresql.serviceConfig.User = "postgres"; };
  namesHookOption = hooks: lib.any (hasInfix "services.tacid.consistentCut.hooks") (hookProblems hooks);

  package = c.services.tacid.package;
  keeper = c.users.users.${layout.keeper_user};
  failing = config: map (a: a.message) (filter (a: !a.assertion) config.assertions);

  # Every option the module sets, and the value each ends up with.
  defined = nixos.definitionsOf tacidModule good;
  forced = map (d: lib.showOption d.option.loc) defined;
  forceAll = all (d: nixos.forceDefined d.definition d.value) defined;
  # The value of the option `path` from the module's own definition alone.
  setByModule = path: (head (filter (d: lib.showOption d.option.loc == path) defined)).value;

  unitAttr = tacidLib.serviceAttrName;
  hasInfix = lib.hasInfix;
  timerAttr = tacidLib.timerAttrName layout.timeline_timer;
  healthTimerAttr = tacidLib.timerAttrName layout.health_timer;
  dropInScript = config: (builtins.elemAt config.systemd.packages 1).script;
  pruneOnly = tacidLib.pruneOnlyDropIn { unit = "${package}/lib/systemd/system/${layout.timeline_unit}"; };
  preSwitch = c.system.preSwitchChecks.tacid;
  # The units systemd.nix renders from systemd.services and systemd.timers (that module is
  # not among the copies; the functions it calls are, in systemd-lib.nix).
  systemdLib = good._module.args.utils.systemdUtils.lib;
  systemUnits =
    lib.mapAttrs' (n: _: lib.nameValuePair "${n}.service" (systemdLib.serviceToUnit c.systemd.services.${n})) (removeAttrs (setByModule "systemd.services") [ essentialsUnit ])
    // lib.mapAttrs' (n: _: lib.nameValuePair "${n}.timer" (systemdLib.timerToUnit c.systemd.timers.${n})) (setByModule "systemd.timers");
in
{
  inherit forced;
  checks = all (x: x) [
    (check "the module sets no option that is only a sink here (its values would go unchecked)"
      (all (d: d.option.type.name != "sink") defined))
    (check "every value the module sets evaluates, all the way down" forceAll)
    (check "the module sets exactly these options: ${toString forced}"
      (lib.sort lib.lessThan forced == [
        "assertions"
        "boot.initrd.systemd.extraBin"
        "boot.initrd.systemd.packages"
        "boot.initrd.systemd.services"
        "boot.initrd.systemd.storePaths"
        "boot.kernelParams"
        "environment.systemPackages"
        "fileSystems"
        "services.dbus.packages"
        "services.tacid.fileSystems"
        "system.preSwitchChecks"
        "systemd.packages"
        "systemd.paths"
        "systemd.services"
        "systemd.sockets"
        "systemd.timers"
        "systemd.tmpfiles.rules"
        "systemd.user.services"
        "users.groups"
        "users.users"
      ]))
    (check "every assertion holds, the module's and upstream's: ${toString (failing c)}" (failing c == [ ]))
    (check "no warnings: ${toString c.warnings}" (c.warnings == [ ]))
    (check "the module declares enable, package, device, approverGroup and the pre-switch snapshot"
      (all (o: options ? ${o}) [ "enable" "package" "device" "approverGroup" "preSwitchSnapshot" ]))
    (check "the package defaults to this repository's, built with the machine's package set"
      (lib.isDerivation package && package.pname == "tacid" && package.system == "x86_64-linux"
        && package.cargoBuildFlags == builtins.concatMap (b: [ "--bin" b.name ]) (builtins.attrValues shipped.binaries)))
    (check "the package's source leaves out build outputs (target/, the boot tier's cache, disk images) and VCS files, and keeps the sources"
      (
        let keeps = rel: type: package.src.filter "${toString ../..}/${rel}" type; in
        !(keeps "target" "directory") && !(keeps "fuzz/corpus" "directory") && !(keeps "checks/boot/cache" "directory")
        && !(keeps "disk.img" "regular") && !(keeps ".git" "directory") && !(keeps "result" "symlink")
        && keeps "layout" "directory" && keeps "Cargo.lock" "regular" && keeps "nixos-modules/layout.json" "regular"
      ))
    (check "approverGroup defaults to the layout's group" (c.services.tacid.approverGroup == layout.defaults.approver_group))
    (check "device defaults to the layout's device" (c.services.tacid.device == layout.default_device))
    (check "the pre-switch set defaults to the default snapshot set"
      (c.services.tacid.preSwitchSnapshot.subvolumes == tacidLib.snapshotByDefault))
    (check "the documented default of the pre-switch set is a Nix list of it"
      (options.preSwitchSnapshot.subvolumes.defaultText.text
        == "[ ${builtins.concatStringsSep " " (map (n: "\"${n}\"") tacidLib.snapshotByDefault)} ]"))
    (check "the keeper's user is a system user in its own group, and its description is a passwd field"
      (keeper.isSystemUser && !keeper.isNormalUser && keeper.group == layout.keeper_user
        && !(hasInfix ":" keeper.description) && c.users.groups ? ${layout.keeper_user}
        && keeper.name == layout.keeper_user))
    # With the systemd initrd, upstream's filesystems.nix adds x-initrd.mount to the mounts
    # needed for boot: that is what makes the initrd mount them.
    (check "every mount of the layout, as a real fileSystems entry, mounted in the initrd when needed for boot"
      (all
        (s:
          let
            fs = c.fileSystems.${s.mount_point};
            neededForBoot = s.name != layout.snapshots_subvolume;
          in
          fs.device == layout.default_device && fs.fsType == "btrfs" && fs.mountPoint == s.mount_point
          && filter (lib.hasPrefix "subvol=") fs.options == [ "subvol=${s.name}" ]
          && fs.neededForBoot == neededForBoot && elem "x-initrd.mount" fs.options == neededForBoot)
        tacidLib.mounted))
    (check "the initrd gets tacid-initrd at /bin from the package"
      (c.boot.initrd.systemd.extraBin.${shipped.binaries.initrd.name} == "${package}/bin/${shipped.binaries.initrd.name}"))
    (check "the initrd gets the package's units (a copy of them), and enables what shipped.json says"
      (length c.boot.initrd.systemd.packages == 1
        && all (e: c.boot.initrd.systemd.services.${unitAttr (tacidLib.fileName e)}.wantedBy == [ e.wanted_by ]) tacidLib.enabledInitrdUnits
        && all (u: c.boot.initrd.systemd.units ? ${u} && nixos.force c.boot.initrd.systemd.units.${u}) tacidLib.initrdUnits))
    (check "systemd units and D-Bus files come from the package"
      (head c.systemd.packages == package && length c.systemd.packages == 2
        && c.services.dbus.packages == [ package ] && elem package c.environment.systemPackages))
    (check "only shipped system units are enabled, each by its [Install] target, besides the module's own service keeping the essentials"
      (attrNames (setByModule "systemd.services") == lib.sort lib.lessThan (map (e: unitAttr (tacidLib.fileName e)) tacidLib.enabledSystemUnits ++ [ essentialsUnit ])
        && all (e: c.systemd.services.${unitAttr (tacidLib.fileName e)}.wantedBy == [ e.wanted_by ]) tacidLib.enabledSystemUnits))
    (check "the system units render as systemd.nix renders them, as drop-ins on the package's units"
      (all nixos.force (builtins.attrValues systemUnits)
        && attrNames systemUnits == lib.sort lib.lessThan [ layout.keeper_unit layout.timeline_timer layout.health_timer ]
        && all (u: u.overrideStrategy == "asDropinIfExists" && !(hasInfix "ExecStart" u.text)) (builtins.attrValues systemUnits)))
    (check "tmpfiles makes the keeper's directory"
      (setByModule "systemd.tmpfiles.rules" == tacidLib.tmpfilesRules
        && all (r: elem r c.systemd.tmpfiles.rules) tacidLib.tmpfilesRules))
    (check "the pre-switch check runs the running system's CLI on the configured set"
      (hasInfix "/run/current-system/sw/bin/${shipped.binaries.cli.name} data snapshot --pre-switch ${builtins.concatStringsSep " " (map (n: "'${n}'") c.services.tacid.preSwitchSnapshot.subvolumes)} --reason" preSwitch))
    (check "upstream's pre-switch-check.nix puts the fragment into the switch's script"
      (hasInfix preSwitch c.system.preSwitchChecks.script.text))
    (check "no pre-switch check when it is turned off"
      (!((machine { preSwitchSnapshot.enable = false; }).config.system.preSwitchChecks ? tacid)))
    (check "no kernel parameter for the default device"
      (setByModule "boot.kernelParams" == [ ] && !(lib.any (lib.hasPrefix "${layout.kernel_device_key}=") c.boot.kernelParams)))
    (check "another device goes to the initrd on the kernel command line, into every mount and the stem's drop-in"
      (elem "${layout.kernel_device_key}=/dev/vdb" other.boot.kernelParams
        && all (s: other.fileSystems.${s.mount_point}.device == "/dev/vdb") tacidLib.mounted
        && failing other == [ ]
        && hasInfix "DeviceAllow=/dev/vdb rw" (dropInScript other)))
    (check "retention defaults are the layout's (layout::defaults) and each count is a whole number"
      (c.services.tacid.retention == {
        preSwitchSets = layout.defaults.keep_pre_switch_sets;
        hourly = layout.defaults.keep_hourly;
        daily = layout.defaults.keep_daily;
        weekly = layout.defaults.keep_weekly;
        monthly = layout.defaults.keep_monthly;
        manualMaxAgeDays = layout.defaults.manual_max_age_days;
        freeFloorBytes = layout.defaults.free_floor_bytes;
        hardFloorBytes = layout.defaults.hard_floor_bytes;
        keepReplacedDays = layout.defaults.keep_replaced_days;
        timeline = true;
      } && all (o: o.type.name == "unsignedInt") (builtins.attrValues (removeAttrs options.retention [ "timeline" ]))))
    (check "metrics: the keeper writes them too, into the directory its ACL and ReadWritePaths= open to it"
      (
        let withMetrics = (machine { metrics.directory = "/var/lib/textfiles"; }).config; in
        hasInfix "--metrics-file /var/lib/textfiles/tacid.prom|" (dropInScript withMetrics)
        && hasInfix "ReadWritePaths=-/var/lib/textfiles" (dropInScript withMetrics)
        && all
          (u: withMetrics.systemd.services.${unitAttr u}.serviceConfig.ExecStopPost
          == [ "-${package}/bin/${shipped.binaries.cli.name} data health --metrics-file /var/lib/textfiles/tacid.prom" ]
          && withMetrics.systemd.services.${unitAttr u}.serviceConfig.ReadWritePaths == [ "-/var/lib/textfiles" ])
          [ layout.timeline_unit layout.health_unit ]
        && !(c.systemd.services ? ${unitAttr layout.health_unit})
        && elem "a+ /var/lib/textfiles - - - - u:${layout.keeper_user}:rwx" withMetrics.systemd.tmpfiles.rules
        && !(hasInfix "--metrics-file" (dropInScript c))
        && !(lib.any (hasInfix "u:${layout.keeper_user}") c.systemd.tmpfiles.rules)
      ))
    (check "the timeline timer is enabled, with the timeline on and off (then it checks the floor)"
      (c.systemd.timers.${timerAttr}.wantedBy == [ "timers.target" ]
        && noTimeline.systemd.timers.${timerAttr}.wantedBy == [ "timers.target" ]
        && attrNames c.systemd.timers == [ healthTimerAttr timerAttr ] && attrNames noTimeline.systemd.timers == [ healthTimerAttr timerAttr ]))
    (check "the hourly health check is enabled, and its shipped service alerts when it warns or fails"
      (c.systemd.timers.${healthTimerAttr}.wantedBy == [ "timers.target" ]
        && hasInfix "\nOnFailure=${lib.replaceStrings [ "@." ] [ "@%n." ] layout.alert_unit}\n"
        (builtins.readFile (../.. + "/${tacidLib.sourcePath (lib.findFirst (e: e.layout_key == "health_unit") null shipped.files)}"))
        && elem "${layout.health_unit}" (map tacidLib.fileName (filter (e: e.install_dir == "lib/systemd/system") shipped.files))
        && elem "${layout.health_timer}" (map tacidLib.fileName (filter (e: e.install_dir == "lib/systemd/system") shipped.files))))
    (check "timeline on: the shipped timeline service as it is, no drop-in for it"
      (!(hasInfix layout.timeline_unit (dropInScript c))
        && hasInfix "${layout.keeper_unit}.d/${tacidLib.moduleDropIn}" (dropInScript c)))
    (check "the keeper is told whether the timeline takes sets, so health expects no hourly set with it off"
      (hasInfix "-e 's| --timeline [^ ]+| --timeline false|'" (dropInScript noTimeline)
        && hasInfix "-e 's| --timeline [^ ]+| --timeline true|'" (dropInScript c)))
    (check "timeline off: a drop-in makes the package's timeline service prune only"
      (hasInfix "mkdir -p $out/lib/systemd/system/${layout.timeline_unit}.d" (dropInScript noTimeline)
        && hasInfix pruneOnly (dropInScript noTimeline)
        && hasInfix ") >$out/lib/systemd/system/${layout.timeline_unit}.d/${tacidLib.moduleDropIn}" (dropInScript noTimeline)))
    (check "the notifier notifies the approver group the keeper is given, by its user unit's drop-in"
      (
        let
          admins = (machineWith { approverGroup = "admins"; } { users.groups.admins = { }; }).config;
          notifyDropIn = "$out/lib/systemd/user/${layout.notify_user_unit}.d/${tacidLib.moduleDropIn}";
        in
        failing admins == [ ]
        && hasInfix "-e 's| --group [^ ]+| --group admins|'" (dropInScript admins)
        && hasInfix "-e 's| --approver-group [^ ]+| --approver-group admins|'" (dropInScript admins)
        && hasInfix ") >${notifyDropIn}" (dropInScript admins)
        && hasInfix "-e 's| --group [^ ]+| --group ${layout.defaults.approver_group}|'" (dropInScript c)
      ))
    (check "a missing approver group fails its assertion, naming the option"
      (lib.any (hasInfix "services.tacid.approverGroup") (failing (machine { approverGroup = "nobody-has-this-group"; }).config)))
    (check "the root is mounted from the root subvolume"
      ((head (filter (s: s.name == layout.root_subvolume) layout.subvolumes)).mount_point == "/"))
    (check "no consistent cut: no cut file, the stem's unit untouched by it"
      (c.services.tacid.cutConfigFile == null
        && !(hasInfix "--cut-config" (dropInScript c)) && !(hasInfix "--thaw-cut" (dropInScript c))))
    (check "consistent cut: the file the stem gets is the layout's format, its limits the layout's defaults"
      (cutJson withCut == {
        units = [ "postgresql.service" "app@blue.service" ];
        freeze_timeout_ms = layout.defaults.cut_freeze_timeout_ms;
        hold_limit_ms = layout.defaults.cut_hold_limit_ms;
      }))
    (check "consistent cut: the stem is told the file (one flag) and thaws the units at any stop"
      (lib.length (lib.splitString "| --cut-config ${withCut.services.tacid.cutConfigFile}|" (dropInScript withCut)) == 2
        && hasInfix "ExecStopPost=-${package}/bin/tacid-stem --thaw-cut --cut-config ${withCut.services.tacid.cutConfigFile}" (dropInScript withCut)))
    (check "consistent cut hooks: the file holds each hook with its user (the service's own User= when not given) and the layout's default limits"
      ((cutJson withHooks).hooks == [
        {
          unit = "app.scope";
          user = "app";
          after = [ "/bin/app-resume" ];
          before_limit_ms = layout.defaults.cut_hook_limit_ms;
          after_limit_ms = layout.defaults.cut_hook_limit_ms;
        }
        {
          unit = "postgresql.service";
          user = "postgres";
          before = [ "/run/current-system/sw/bin/psql" "-c" "CHECKPOINT" ];
          before_limit_ms = 5000;
          after_limit_ms = layout.defaults.cut_hook_limit_ms;
        }
      ]
        && !(cutJson withCut ? hooks)
        && hookProblems { "postgresql.service".before = [ "/bin/true" ]; } == [ ]))
    (check "consistent cut hooks: no user to be had, root, a program not by absolute path, no command, and a unit not paused each fail, naming the option"
      (namesHookOption { "app.scope".before = [ "/bin/true" ]; }
        && namesHookOption { "postgresql.service" = { user = "root"; before = [ "/bin/true" ]; }; }
        && namesHookOption { "postgresql.service".before = [ "psql" "-c" "CHECKPOINT" ]; }
        && namesHookOption { "postgresql.service".before = [ ]; }
        && namesHookOption { "postgresql.service" = { }; }
        && namesHookOption { "other.service" = { user = "x"; before = [ "/bin/true" ]; }; }))
    (check "consistent cut: a unit without processes of its own, a bare name, a template, one named twice and a hold limit below the freeze timeout each fail, naming the option"
      (namesCutOption { units = [ "sshd.socket" ]; }
        && namesCutOption { units = [ "postgresql" ]; }
        && namesCutOption { units = [ "getty@.service" ]; }
        && namesCutOption { units = [ "a.service" "a.service" ]; }
        && namesCutOption { units = [ "a.service" ]; freezeTimeoutMs = 5000; holdLimitMs = 4000; }
        && cutProblems { units = [ "postgresql.service" "user-1000.slice" "session-2.scope" ]; } == [ ]))
    (check "no copies: no copies file, no copy units, the stem's unit untouched by copies"
      (c.services.tacid.copiesConfigFile == null
        && !(hasInfix "--copies-config" (dropInScript c)) && !(hasInfix tacidLib.stemCopyDropIn (dropInScript c))
        && !(c.systemd.services ? ${copyUnit "usb"})))
    (check "copies: the file both daemons get is the layout's format, one target per name, keep defaults from the layout"
      (copiesJson withCopies == {
        targets = {
          usb = {
            place = "/mnt/backup/tacid";
            keep = { latest = layout.defaults.keep_copies_latest; daily = layout.defaults.keep_copies_daily; weekly = layout.defaults.keep_copies_weekly; monthly = layout.defaults.keep_copies_monthly; };
          };
          offsite = {
            place = "ssh://root@backup.example.org:2222/srv/tacid/laptop";
            identity = "/etc/tacid/copy-key";
            host_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
            keep = { latest = 5; daily = layout.defaults.keep_copies_daily; weekly = layout.defaults.keep_copies_weekly; monthly = layout.defaults.keep_copies_monthly; };
            # An hourly timer: its copies are late after two hours and an hour, not two days.
            health = { copy_warn_secs = 3 * 3600; copy_fail_secs = layout.defaults.health_copy_fail_secs; };
          };
        };
      }))
    (check "copies: a weekly target's health thresholds are its timer's, a monthly verification's too"
      ((copiesJson (machine {
        copies.weekly = {
          target = "/mnt/weekly";
          schedule = "weekly";
          seal = { enable = true; verifySchedule = "monthly"; };
        };
      }).config).targets.weekly.health == {
        copy_warn_secs = 2 * 604800 + 3600;
        copy_fail_secs = 3 * 604800;
        verify_warn_secs = 2 * 2678400 + 3600;
      }))
    (check "copies: the stem, its receiver and the keeper are told the file by their drop-ins (one flag each)"
      (lib.length (lib.splitString "| --copies-config ${withCopies.services.tacid.copiesConfigFile}|" (dropInScript withCopies)) == 4))
    (check "copies: the stem's copy drop-ins are linked in, the network one only for an SSH target"
      (hasInfix "/${tacidLib.stemCopyDropInsDir}/${tacidLib.stemCopyDropIn} " (dropInScript withCopies)
        && hasInfix "/${tacidLib.stemCopyDropInsDir}/${tacidLib.stemSshDropIn} " (dropInScript withCopies)
        && hasInfix "/${tacidLib.stemCopyDropInsDir}/${tacidLib.stemCopyDropIn} " (dropInScript onlyLocalCopies)
        && !(hasInfix tacidLib.stemSshDropIn (dropInScript onlyLocalCopies))))
    (check "copies: the receiver has btrfs-progs and the stem none; the stem has ssh only with an SSH target"
      (
        let
          names = config: map (p: p.name) config.systemd.services.${unitAttr layout.stem_unit}.path;
          receiver = config: map (p: p.name) config.systemd.services.${unitAttr layout.stem_receive_service_unit}.path;
        in
        elem "btrfs-progs" (receiver withCopies) && elem "btrfs-progs" (receiver onlyLocalCopies)
        && elem "openssh" (names withCopies) && !(elem "btrfs-progs" (names withCopies))
        && !(onlyLocalCopies.systemd.services ? ${unitAttr layout.stem_unit})
        && !(c.systemd.services ? ${unitAttr layout.stem_unit})
        && !(c.systemd.services ? ${unitAttr layout.stem_receive_service_unit})
      ))
    (check "copies: the receiver's socket is enabled with copies, and only then"
      (withCopies.systemd.sockets.${lib.removeSuffix ".socket" layout.stem_receive_socket_unit}.wantedBy == [ "sockets.target" ]
        && onlyLocalCopies.systemd.sockets.${lib.removeSuffix ".socket" layout.stem_receive_socket_unit}.wantedBy == [ "sockets.target" ]
        && !(c.systemd.sockets ? ${lib.removeSuffix ".socket" layout.stem_receive_socket_unit})))
    (check "copies: the receiver is told the copies file by its drop-in, which makes each local Btrfs target writable for it and nothing else"
      (hasInfix "${layout.stem_receive_service_unit}.d" (dropInScript withCopies)
        && hasInfix "ReadWritePaths=-/mnt/backup/tacid" (dropInScript withCopies)
        && !(hasInfix "ReadWritePaths=-/srv/tacid" (dropInScript withCopies))
        && !(hasInfix "${layout.stem_receive_service_unit}.d" (dropInScript c))))
    (check "copies: a timer per target, on its schedule, starting the CLI's copy to that target (rendered as systemd.nix renders them)"
      (withCopies.systemd.timers.${copyUnit "offsite"}.timerConfig.OnCalendar == "hourly"
        && withCopies.systemd.timers.${copyUnit "usb"}.timerConfig.OnCalendar == "daily"
        && withCopies.systemd.timers.${copyUnit "usb"}.wantedBy == [ "timers.target" ]
        && withCopies.systemd.services.${copyUnit "usb"}.serviceConfig.ExecStart == "${package}/bin/${shipped.binaries.cli.name} data copy --to usb"
        && nixos.force (systemdLib.serviceToUnit withCopies.systemd.services.${copyUnit "usb"})
        && nixos.force (systemdLib.timerToUnit withCopies.systemd.timers.${copyUnit "offsite"})
        && failing withCopies == [ ]))
    (check "copies: an SSH target without a pinned host key or a key fails its assertion, naming the option"
      (lib.any (hasInfix "services.tacid.copies.\"far\": an SSH target needs") (copiesProblems { far.target = "ssh://backup/srv/x"; })))
    (check "copies: a local target on the tacid disk itself fails its assertion"
      (lib.any (hasInfix "dies with the disk") (copiesProblems { here.target = "/persist/backups"; })
        && lib.any (hasInfix "dies with the disk") (copiesProblems { here.target = "/home"; })
        && copiesProblems { there.target = "/homes-backup"; } == [ ]))
    (check "sealed copies: the file says seal for each sealed target, with the layout's chain bound unless set"
      (copiesJson withSealed == {
        targets = {
          usb = {
            place = "/mnt/usb/tacid";
            keep = { latest = layout.defaults.keep_copies_latest; daily = layout.defaults.keep_copies_daily; weekly = layout.defaults.keep_copies_weekly; monthly = layout.defaults.keep_copies_monthly; };
            seal = { region = "garage"; http = false; full_every = layout.defaults.seal_full_every; full_past_bytes = null; };
          };
          nas = {
            place = "ssh://tacid@nas.example.org/srv/tacid";
            identity = "/var/lib/tacid-copier/ssh/id_ed25519";
            host_key = hostKey;
            keep = { latest = layout.defaults.keep_copies_latest; daily = layout.defaults.keep_copies_daily; weekly = layout.defaults.keep_copies_weekly; monthly = layout.defaults.keep_copies_monthly; };
            seal = { region = "garage"; http = false; full_every = 7; full_past_bytes = null; };
          };
        };
      }))
    (check "sealed copies: the copier runs, as its own user, with ssh for an SSH target"
      (withSealed.systemd.services.${copierAttr}.wantedBy == [ "multi-user.target" ]
        && elem "openssh" (map (p: p.name) withSealed.systemd.services.${copierAttr}.path)
        && withSealed.users.users.${layout.copier_user}.isSystemUser
        && withSealed.users.users.${layout.copier_user}.group == layout.copier_user
        && withSealed.users.groups ? ${layout.copier_user}
        && elem "d ${layout.snapshots_mount_point}/${layout.copier_dir} 0700 ${layout.copier_user} ${layout.copier_user} -" withSealed.systemd.tmpfiles.rules
        && !(lib.any (hasInfix layout.copier_dir) withCopies.systemd.tmpfiles.rules)))
    (check "sealed copies: the copier is told the copies file by its drop-in, which makes each sealed directory writable for it and nothing else"
      (hasInfix "${layout.copier_unit}.d" (dropInScript withSealed)
        && hasInfix "echo 'ReadWritePaths=-/mnt/usb/tacid'" (dropInScript withSealed)
        && lib.length (lib.splitString "ReadWritePaths=" (dropInScript withSealed)) == 2
        && lib.length (lib.splitString "| --copies-config ${withSealed.services.tacid.copiesConfigFile}|" (dropInScript withSealed)) == 5))
    (check "sealed copies: the stem gets neither the network drop-in nor ssh for a sealed SSH target"
      (true
        && !(hasInfix tacidLib.stemSshDropIn (dropInScript withSealed))
        && hasInfix "/${tacidLib.stemCopyDropInsDir}/${tacidLib.stemCopyDropIn} " (dropInScript withSealed)
        && !(withSealed.systemd.services ? ${unitAttr layout.stem_unit})))
    (check "sealed copies: no sealed target, no copier (no user, no unit settings, no drop-in)"
      (!(withCopies.users.users ? ${layout.copier_user}) && !(withCopies.systemd.services ? ${copierAttr})
        && !(hasInfix "${layout.copier_unit}.d" (dropInScript withCopies))))
    (check "sealed copies: a weekly verification timer by default, none when its schedule is null (rendered as systemd.nix renders them)"
      (withSealed.systemd.timers.${verifyUnit "usb"}.timerConfig.OnCalendar == "weekly"
        && withSealed.systemd.timers.${verifyUnit "usb"}.wantedBy == [ "timers.target" ]
        && withSealed.systemd.services.${verifyUnit "usb"}.serviceConfig.ExecStart == "${package}/bin/${shipped.binaries.cli.name} data verify --target usb --timer"
        && !(withSealed.systemd.timers ? ${verifyUnit "nas"}) && !(withSealed.systemd.services ? ${verifyUnit "nas"})
        && !(withCopies.systemd.timers ? ${verifyUnit "usb"})
        && nixos.force (systemdLib.serviceToUnit withSealed.systemd.services.${verifyUnit "usb"})
        && nixos.force (systemdLib.timerToUnit withSealed.systemd.timers.${verifyUnit "usb"})))
    (check "sealed copies: an s3:// target is sealed without asking, with its credentials file in the copier's configuration; no drop-in gives the stem the network"
      ((copiesJson withS3).targets.cloud == {
        place = "s3://127.0.0.1:3900/tacid-bucket/laptop";
        keep = { latest = layout.defaults.keep_copies_latest; daily = layout.defaults.keep_copies_daily; weekly = layout.defaults.keep_copies_weekly; monthly = layout.defaults.keep_copies_monthly; };
        seal = { credentials = "/var/lib/tacid-copier/cloud.credentials"; region = "garage"; http = true; full_every = layout.defaults.seal_full_every; full_past_bytes = null; };
      }
        && withS3.systemd.services.${copierAttr}.wantedBy == [ "multi-user.target" ]
        && !(elem "openssh" (map (p: p.name) withS3.systemd.services.${copierAttr}.path))
        && withS3.systemd.timers ? ${verifyUnit "cloud"}
        && !(hasInfix tacidLib.stemSshDropIn (dropInScript withS3))
        && failing withS3 == [ ]))
    (check "sealed copies: an s3:// target without a credentials file fails its assertion, naming the option"
      (lib.any (hasInfix "services.tacid.copies.\"cloud\": an s3:// target needs seal.credentialsFile") (copiesProblems { cloud.target = "s3://s3.example.org/bucket"; })))
    (check "sealed copies: credentials on a target that is not s3:// fail their assertion, naming the option"
      (lib.any (hasInfix "seal.credentialsFile is for s3:// targets") (copiesProblems { usb = { target = "/mnt/usb"; seal = { enable = true; credentialsFile = "/var/lib/tacid-copier/c"; }; }; })))
    (check "sealed copies: a sealed directory on the tacid disk itself fails its assertion (a copy there dies with the disk)"
      (lib.any (hasInfix "dies with the disk") (copiesProblems { here = { target = "/persist/backups"; seal.enable = true; }; })))
    (check "copies: a target name people cannot type after --to fails its assertion"
      (lib.any (hasInfix "must match") (copiesProblems { "Big Disk".target = "/mnt/x"; })))
    (check "subvolume options as a set: the module's and a user's own subvol= are one, and compress=zstd, noatime, space_cache are the user's"
      (failingWith { }
        {
          fileSystems."/".options = [ "subvol=@root" "compress=zstd" "noatime" "space_cache=v2" ];
          fileSystems."/home".options = [ "noatime" "subvol=/@home" ];
        } == [ ]
      && (
        let fs = (machineWith { } { fileSystems."/".options = [ "subvol=@root" "compress=zstd" ]; }).config.fileSystems."/"; in
        elem "compress=zstd" fs.options && elem "subvol=@root" fs.options
      )))
    (check "subvolume options: another subvolume still fails, naming both"
      (lib.any (hasInfix "its subvolume options are [ subvol=@home subvol=@persist ]")
        (failingWith { } { fileSystems."/home".options = [ "subvol=@persist" ]; })))
    (check "a bind mount where tacid mounts a subvolume (older impermanence's /var/log) says environment.persistence, not hardware-configuration.nix"
      (
        let msgs = failingWith { } { fileSystems."/var/log" = { device = lib.mkForce "/persist/var/log"; options = [ "bind" ]; }; }; in
        lib.any
          (m: hasInfix "it is a bind mount of /persist/var/log" m && hasInfix "remove \"/var/log\" from environment.persistence" m
            && !(hasInfix "hardware-configuration.nix" m))
          msgs
      ))
    (check "ephemeralRoot defaults to true: the wipe unit is in the initrd, enabled"
      (c.services.tacid.ephemeralRoot
        && c.boot.initrd.systemd.services ? ${wipeAttr}
        && c.boot.initrd.systemd.services.${wipeAttr}.wantedBy == [ "initrd.target" ]
        && hasInfix "/${layout.initrd_wipe_root_unit} " (initrdUnitsScript c)))
    (check "ephemeralRoot = false: no wipe unit in the initrd (neither copied nor enabled), the restore still there, nothing kept by copying, every assertion holds"
      (!(keptRoot.boot.initrd.systemd.services ? ${wipeAttr})
        && !(hasInfix layout.initrd_wipe_root_unit (initrdUnitsScript keptRoot))
        && !(keptRoot.boot.initrd.systemd.units ? ${layout.initrd_wipe_root_unit})
        && keptRoot.boot.initrd.systemd.services.${restoreAttr}.wantedBy == [ "initrd.target" ]
        && hasInfix "/${layout.initrd_restore_unit} " (initrdUnitsScript keptRoot)
        && !(keptRoot.boot.initrd.systemd.services ? ${essentialsUnit})
        && !(keptRoot.fileSystems ? "/var/lib/nixos")
        && failing keptRoot == [ ]))
    (check "ephemeralRoot = false: everything else the same (mounts, daemons, timers, pre-switch set, tmpfiles)"
      (all (s: keptRoot.fileSystems.${s.mount_point}.options == c.fileSystems.${s.mount_point}.options) tacidLib.mounted
        && keptRoot.systemd.packages == c.systemd.packages
        && attrNames keptRoot.systemd.timers == attrNames c.systemd.timers
        && keptRoot.system.preSwitchChecks.tacid == preSwitch
        && keptRoot.systemd.tmpfiles.rules == c.systemd.tmpfiles.rules
        && keptRoot.services.dbus.packages == c.services.dbus.packages))
    (check "services.tacid can be read, all of it, on a machine without tacid"
      (nixos.force withoutTacid.services.tacid && withoutTacid.services.tacid.fileSystems == { }
        && withoutTacidEval.options.services.tacid.fileSystems.isDefined))
    (check "the essentials' directories: bind mounts from ${persistDir}, mounted in the initrd after it"
      (all
        (dir:
          let fs = c.fileSystems.${dir}; in
          fs.device == "${persistDir}${dir}" && fs.fsType == "none" && elem "bind" fs.options && fs.neededForBoot
          && elem "x-initrd.mount" fs.options && elem "x-systemd.requires-mounts-for=/sysroot${persistDir}" fs.options
          && c.services.tacid.fileSystems ? ${dir})
        [ "/var/lib/nixos" "/var/lib/systemd" ]))
    (check "the essentials' initrd unit, rendered: after ${persistDir} is mounted, before the bind mounts and activation; it makes the directories and copies the files in"
      (
        let text = initrdUnitText c "${essentialsUnit}.service"; in
        hasInfix "RequiresMountsFor=/sysroot${persistDir} /sysroot/etc /sysroot/etc/ssh\n" text
        && hasInfix "Before=initrd-nixos-activation.service initrd.target sysroot-var-lib-nixos.mount sysroot-var-lib-systemd.mount" text
        && hasInfix "DefaultDependencies=false" text
        && c.boot.initrd.systemd.services.${essentialsUnit}.wantedBy == [ "initrd.target" ]
        && all (f: hasInfix "'${f}'" c.boot.initrd.systemd.services.${essentialsUnit}.script)
          [ "/etc/machine-id" "/etc/ssh/ssh_host_ed25519_key" "/etc/ssh/ssh_host_ed25519_key.pub" "/etc/shadow" "/etc/passwd" "/etc/group" "/etc/gshadow" "${persistDir}/var/lib/nixos" ]
      ))
    (check "the essentials' files go back to ${persistDir} when they change (a path unit) and once a boot (the service)"
      (lib.sort lib.lessThan (pathChanged c) == lib.sort lib.lessThan [
        "/etc/machine-id"
        "/etc/ssh/ssh_host_rsa_key"
        "/etc/ssh/ssh_host_rsa_key.pub"
        "/etc/ssh/ssh_host_ed25519_key"
        "/etc/ssh/ssh_host_ed25519_key.pub"
        "/etc/passwd"
        "/etc/group"
        "/etc/shadow"
        "/etc/gshadow"
      ]
        && c.systemd.paths.${essentialsUnit}.wantedBy == [ "paths.target" ]
        && c.systemd.services.${essentialsUnit}.wantedBy == [ "multi-user.target" "sshd.service" "sshd-keygen.service" ]
        && (machine { persistEssentials.sshHostKeys = false; }).config.systemd.services.${essentialsUnit}.wantedBy == [ "multi-user.target" ]
        && c.systemd.services.${essentialsUnit}.after == [ "sshd.service" "sshd-keygen.service" ]
        && nixos.force (systemdLib.pathToUnit c.systemd.paths.${essentialsUnit})
        && nixos.force (systemdLib.serviceToUnit c.systemd.services.${essentialsUnit})))
    (check "each essential can be turned off on its own"
      (!((machine { persistEssentials.nixosIds = false; }).config.fileSystems ? "/var/lib/nixos")
        && (machine { persistEssentials.nixosIds = false; }).config.fileSystems ? "/var/lib/systemd"
        && !((machine { persistEssentials.systemdState = false; }).config.fileSystems ? "/var/lib/systemd")
        && !(elem "/etc/machine-id" (keptFilesOf (machine { persistEssentials.machineId = false; }).config))
        && !(elem "/etc/ssh/ssh_host_ed25519_key" (keptFilesOf (machine { persistEssentials.sshHostKeys = false; }).config))
        && !(elem "/etc/shadow" (keptFilesOf noUsersKept.config))
        && elem "/etc/machine-id" (keptFilesOf noUsersKept.config)))
    (check "the users' files follow users.mutableUsers by default"
      (c.services.tacid.persistEssentials.users
        && !(machineWith { } { users.mutableUsers = false; }).config.services.tacid.persistEssentials.users))
    (check "lockout: mutable users, shadow not kept, no password or key declared for root or wheel: the assertion names the fix"
      (lib.any (m: hasInfix "nobody could log in" m && hasInfix "services.tacid.persistEssentials.users = true" m && hasInfix "users.allowNoPasswordLogin = true;" m) (failing noUsersKept.config)
        && failingWith { persistEssentials.users = false; } { users.allowNoPasswordLogin = true; } == [ ]))
    (check "lockout: a declared password file for root, or for a wheel user, or the shadow kept, or a root kept as it is, and it holds"
      (failingWith { persistEssentials.users = false; } { users.users.root.hashedPasswordFile = "${persistDir}/secrets/root"; } == [ ]
        && failingWith { persistEssentials.users = false; }
        {
          users.users.alice = { isNormalUser = true; extraGroups = [ "wheel" ]; hashedPassword = "$y$j9T$abc$def"; };
        } == [ ]
        && failingWith { persistEssentials.users = false; } { users.users.alice = { isNormalUser = true; extraGroups = [ "wheel" ]; hashedPassword = "!"; }; } != [ ]
        && failingWith { persistEssentials.users = false; ephemeralRoot = false; } { } == [ ]))
    (check "the essentials' initrd unit with only files kept: still before initrd.target (initrd-cleanup's isolate stops a service not yet done), and after the mounts of the directories it copies into"
      (
        let text = initrdUnitText (machine { persistEssentials = { nixosIds = false; systemdState = false; }; }).config "${essentialsUnit}.service"; in
        hasInfix "Before=initrd-nixos-activation.service initrd.target\n" text
        && hasInfix "RequiresMountsFor=/sysroot${persistDir} /sysroot/etc /sysroot/etc/ssh\n" text
      ))
    (check "a mutable /etc overlay (system.etc.overlay): accepted; the copies wait for /sysroot/etc, the overlay's mount, instead of going under it"
      (
        let overlay = (machineWith { } { system.etc.overlay.enable = true; }).config; in
        failing overlay == [ ]
        && hasInfix "/sysroot/etc " (initrdUnitText overlay "${essentialsUnit}.service")
      ))
    (check "an immutable /etc overlay: the files kept in /etc cannot be copied in; the assertion names each option and the ways out"
      (
        let msgs = failingWith { } { system.etc.overlay = { enable = true; mutable = false; }; services.userborn.enable = true; }; in
        lib.any
          (m: hasInfix "system.etc.overlay.mutable = false makes /etc read-only" m
          && hasInfix "services.tacid.persistEssentials.machineId = false;" m
          && hasInfix "services.tacid.persistEssentials.sshHostKeys = false;" m
          && !(hasInfix "persistEssentials.users" m)
          && hasInfix "services.userborn.passwordFilesLocation" m)
          msgs
        # userborn puts its files in /var/lib/nixos there (its default): nothing of the users' is copied.
        && failingWith { persistEssentials = { machineId = false; sshHostKeys = false; }; }
          { system.etc.overlay = { enable = true; mutable = false; }; services.userborn.enable = true; } == [ ]
        # systemd-sysusers keeps them in /var/lib/nixos/etc there: likewise.
        && failingWith { persistEssentials = { machineId = false; sshHostKeys = false; }; }
          { system.etc.overlay = { enable = true; mutable = false; }; systemd.sysusers.enable = true; } == [ ]
        && elem "/etc/shadow" (keptFilesOf (machineWith { } { systemd.sysusers.enable = true; }).config)
      ))
    (check "userborn with its files outside /etc: /etc/passwd and its kin are links there, so they are not copied (the rest is)"
      (
        let ub = (machineWith { } { services.userborn = { enable = true; passwordFilesLocation = "/var/lib/nixos"; }; }).config; in
        !(elem "/etc/shadow" (keptFilesOf ub)) && elem "/etc/machine-id" (keptFilesOf ub)
        && !(hasInfix "'/etc/shadow'" ub.boot.initrd.systemd.services.${essentialsUnit}.script)
        && elem "/etc/shadow" (keptFilesOf (machineWith { } { services.userborn.enable = true; }).config)
      ))
    (check "SSH host keys wherever services.openssh.hostKeys puts them on the root are kept; those on ${persistDir} are there already"
      (
        let
          keys = (machineWith { } {
            services.openssh.hostKeys = [
              { type = "ed25519"; path = "/var/lib/ssh/ssh_host_ed25519_key"; }
              { type = "rsa"; path = "${persistDir}/ssh/ssh_host_rsa_key"; }
            ];
          }).config;
        in
        elem "/var/lib/ssh/ssh_host_ed25519_key" (keptFilesOf keys)
        && elem "/var/lib/ssh/ssh_host_ed25519_key.pub" (keptFilesOf keys)
        && !(lib.any (lib.hasInfix "ssh_host_rsa_key") (keptFilesOf keys))
        && hasInfix "/sysroot/var/lib/ssh" (initrdUnitText keys "${essentialsUnit}.service")
      ))
    (check "lockout: a disabled wheel user's password is no way in"
      (failingWith { persistEssentials.users = false; }
        { users.users.alice = { enable = false; isNormalUser = true; extraGroups = [ "wheel" ]; hashedPassword = "$y$j9T$abc$def"; }; } != [ ]))
    (check "the essentials' save: each copy synced before its rename, the rename synced after, under a name nobody could have put a link at"
      (
        let save = (lib.findFirst (p: p.name == essentialsUnit) null c.environment.systemPackages).text; in
        builtins.match ".*/bin/mktemp \"[$]kept[.]tacid-XXXXXX\".*/bin/cp -a \"[$]file\" \"[$]new\" && [^ ]*/bin/sync \"[$]new\" &&[^&]*/bin/mv -f \"[$]new\" \"[$]kept\" && [^ ]*/bin/sync \"[$]keptIn\".*" save != null
      ))
    (check "both initrd units are ordered before the older impermanence's create-needed-for-boot-dirs.service (rendered)"
      (all (u: hasInfix "Before=create-needed-for-boot-dirs.service" (initrdUnitText c u)) tacidLib.initrdUnits))
    (check "the keeper's user and the drop-in's flags name the layout's keeper"
      (elem layout.keeper_user (attrNames c.users.users)))
  ];
}
