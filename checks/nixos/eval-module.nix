# Evaluates nixos-modules/tacid.nix offline, against a small stand-in for nixpkgs' lib
# (only what the module calls), and checks the configuration it produces:
#   nix-instantiate --eval --strict checks/nixos/eval-module.nix
# This is no substitute for evaluating it inside NixOS (checks.install does that); it
# catches a wrong attribute path or a name not taken from the layout, here, without Nix's
# package set.
let
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout shipped;
  inherit (builtins) all attrNames elem filter head length map;

  check = what: ok: if ok then true else throw "eval-module: ${what}";

  stubLib = {
    mkEnableOption = description: { _option = true; inherit description; };
    mkOption = attrs: attrs // { _option = true; };
    mkIf = cond: value: if cond then value else { };
    # Priorities do not matter here: there is no other definition to lose to.
    mkDefault = value: value;
    optionalString = cond: string: if cond then string else "";
    inherit (builtins) mapAttrs;
    literalExpression = text: { _literal = text; };
    concatStringsSep = builtins.concatStringsSep;
    concatMapStringsSep = sep: f: list: builtins.concatStringsSep sep (map f list);
    types = {
      package = "package";
      str = "str";
      bool = "bool";
      attrs = "attrs";
      listOf = t: "listOf ${t}";
      strMatching = re: "strMatching ${re}";
      ints.unsigned = "ints.unsigned";
    };
  };

  package = "/nix/store/00000000000000000000000000000000-tacid";
  cfgWith = device: {
    enable = true;
    inherit package device;
    approverGroup = layout.default_approver_group;
    # The options' own defaults, as the module system would fill them in.
    retention = builtins.mapAttrs (_: o: o.default) module0.options.services.tacid.retention;
    preSwitchSnapshot = {
      enable = true;
      subvolumes = tacidLib.snapshotByDefault;
    };
    fileSystems = tacidLib.fileSystemsFor device;
  };
  cfg = cfgWith layout.default_device;

  moduleWith = cfg: import ../../nixos-modules/tacid.nix {
    lib = stubLib;
    utils.escapeSystemdPath = p: builtins.replaceStrings [ "/" "-" ] [ "-" "\\x2d" ] (builtins.substring 1 (-1) p);
    pkgs = {
      # A store path that also carries its build script, so the checks can read it.
      runCommand = name: _env: script: { outPath = "/nix/store/00000000000000000000000000000000-${name}"; inherit script; };
      coreutils = "/nix/store/00000000000000000000000000000000-coreutils";
    };
    config = {
      services.tacid = cfg;
      boot.initrd.systemd.enable = true;
      fileSystems = cfg.fileSystems;
      users.groups = {
        ${layout.default_approver_group} = { };
        ${layout.keeper_user} = { };
      };
    };
  };
  module = moduleWith cfg;
  # The module's options do not depend on the configuration: read them from any instance.
  module0 = moduleWith { enable = false; };
  other = (moduleWith (cfgWith "/dev/vdb")).config;
  c = module.config;
  options = module.options.services.tacid;

  unitAttr = tacidLib.serviceAttrName;
  # A literal substring (replaceStrings matches text, not a regular expression).
  hasInfix = needle: haystack: builtins.replaceStrings [ needle ] [ "" ] haystack != haystack;

  # Timeline snapshots off: the timer stays, and the timeline service only prunes.
  noTimeline = (moduleWith (cfg // { retention = cfg.retention // { timeline = false; }; })).config;
  timerAttr = tacidLib.timerAttrName layout.timeline_timer;
  dropInScript = config: (builtins.elemAt config.systemd.packages 1).script;
  pruneOnly = tacidLib.pruneOnlyDropIn { unit = "${package}/lib/systemd/system/${layout.timeline_unit}"; };
in
all (x: x) [
  (check "the module declares enable, package, device, approverGroup and the pre-switch snapshot"
    (all (o: options ? ${o}) [ "enable" "package" "device" "approverGroup" "preSwitchSnapshot" ]))
  (check "approverGroup defaults to the layout's group"
    (options.approverGroup.default == layout.default_approver_group))
  (check "device defaults to the layout's device"
    (options.device.default == layout.default_device))
  (check "the pre-switch set defaults to the default snapshot set"
    (options.preSwitchSnapshot.subvolumes.default == tacidLib.snapshotByDefault))
  (check "a good configuration passes every assertion"
    (filter (a: !a.assertion) c.assertions == [ ]))
  (check "fileSystems is the layout's mounts"
    (c.fileSystems == tacidLib.fileSystemsFor layout.default_device))
  (check "the initrd gets tacid-initrd at /bin from the package"
    (c.boot.initrd.systemd.extraBin.${shipped.binaries.initrd.name} == "${package}/bin/${shipped.binaries.initrd.name}"))
  (check "the initrd gets the package's units (a copy of them), and enables what shipped.json says"
    (length c.boot.initrd.systemd.packages == 1
      && all (e: elem (unitAttr (tacidLib.fileName e)) (attrNames c.boot.initrd.systemd.services)) tacidLib.enabledInitrdUnits
      && all (n: elem "${n}.service" tacidLib.initrdUnits) (attrNames c.boot.initrd.systemd.services)))
  (check "systemd units and D-Bus files come from the package"
    (builtins.head c.systemd.packages == package && length c.systemd.packages == 2
      && c.services.dbus.packages == [ package ]))
  (check "only shipped system units are enabled"
    (all (n: elem "${n}.service" [ layout.stem_unit layout.keeper_unit ]) (attrNames c.systemd.services)))
  (check "the keeper's user and group exist"
    (c.users.users.${layout.keeper_user}.isSystemUser && c.users.users.${layout.keeper_user}.group == layout.keeper_user
      && c.users.groups ? ${layout.keeper_user}))
  (check "tmpfiles makes the keeper's directory"
    (c.systemd.tmpfiles.rules == tacidLib.tmpfilesRules))
  (check "the pre-switch check runs the running system's CLI on the configured set"
    (builtins.match ".*/run/current-system/sw/bin/${shipped.binaries.cli.name} data snapshot --pre-switch ${builtins.concatStringsSep " " (map (n: "'${n}'") cfg.preSwitchSnapshot.subvolumes)} --reason.*" c.system.preSwitchChecks.tacid != null))
  (check "no kernel parameter for the default device"
    (c.boot.kernelParams == [ ]))
  (check "another device goes to the initrd on the kernel command line, and into every mount"
    (other.boot.kernelParams == [ "${layout.kernel_device_key}=/dev/vdb" ]
      && all (f: f.device == "/dev/vdb") (builtins.attrValues other.fileSystems)
      && filter (a: !a.assertion) other.assertions == [ ]))
  (check "the documented default of the pre-switch set is a Nix list of it"
    (options.preSwitchSnapshot.subvolumes.defaultText._literal
      == "[ ${builtins.concatStringsSep " " (map (n: "\"${n}\"") tacidLib.snapshotByDefault)} ]"))
  (check "retention defaults are adr/0013's and each is a whole number"
    (cfg.retention == {
      preSwitchSets = 10;
      hourly = 24;
      daily = 7;
      weekly = 4;
      monthly = 6;
      manualMaxAgeDays = 0;
      freeFloorBytes = 2147483648;
      hardFloorBytes = 536870912;
      timeline = true;
    } && all (o: o.type == "ints.unsigned") (builtins.attrValues (removeAttrs options.retention [ "timeline" ]))))
  (check "the timeline timer is enabled, with the timeline on and off (then it checks the floor)"
    (c.systemd.timers.${timerAttr}.wantedBy == [ "timers.target" ]
      && (noTimeline.systemd.timers.${timerAttr}.wantedBy or [ ]) == [ "timers.target" ]
      && attrNames c.systemd.timers == [ timerAttr ] && attrNames noTimeline.systemd.timers == [ timerAttr ]))
  (check "timeline on: the shipped timeline service as it is, no drop-in for it"
    (!(hasInfix layout.timeline_unit (dropInScript c))
      && hasInfix "${layout.keeper_unit}.d/services-tacid.conf" (dropInScript c)))
  (check "timeline off: a drop-in makes the package's timeline service prune only"
    (hasInfix "mkdir -p $out/lib/systemd/system/${layout.timeline_unit}.d" (dropInScript noTimeline)
      && hasInfix pruneOnly (dropInScript noTimeline)
      && hasInfix ") >$out/lib/systemd/system/${layout.timeline_unit}.d/services-tacid.conf" (dropInScript noTimeline)))
  (check "the root is mounted from the root subvolume"
    ((head (filter (s: s.name == layout.root_subvolume) layout.subvolumes)).mount_point == "/"))
]
