# Offline checks of what the module derives from the layout (no nixpkgs needed):
#   nix-instantiate --eval --strict checks/nixos/eval-lib.nix
# Evaluates to true, or fails with the check that did not hold.
let
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout shipped;
  inherit (builtins) all any attrNames elem filter length map;

  check = what: ok: if ok then true else throw "eval-lib: ${what}";

  device = "/dev/disk/by-label/${layout.filesystem_label}";
  fs = tacidLib.fileSystemsFor device;
  mountedNames = map (s: s.name) tacidLib.mounted;

  good = {
    inherit device;
    initrdSystemd = true;
    fileSystems = fs;
    approverGroup = layout.defaults.approver_group;
    groups = [ layout.defaults.approver_group layout.keeper_user ];
    preSwitchSubvolumes = tacidLib.snapshotByDefault;
  };
  failing = args: map (a: a.message) (filter (a: !a.assertion) (tacidLib.assertionsFor (good // args)));
  failsOnce = args: needle:
    let f = failing args; in
    length f == 1 && builtins.match ".*${needle}.*" (builtins.head f) != null;

  root = layout.root_subvolume;
  rootMount = (builtins.head (filter (s: s.name == root) layout.subvolumes)).mount_point;

  preSwitch = tacidLib.preSwitchScript {
    tacid = "/run/current-system/sw/bin/${shipped.binaries.cli.name}";
    coreutils = "/coreutils";
    skipFile = "/run/skip";
    snapshotArgs = [ ];
  };
  contains = needle: haystack: builtins.match ".*${needle}.*" haystack != null;
in
all (x: x) [
  (check "the layout's default device is the label the disk script writes"
    (layout.default_device == device))
  (check "every mounted subvolume has exactly one fileSystems entry"
    (length (attrNames fs) == length tacidLib.mounted))
  (check "each mount is its own subvolume of the tacid device, Btrfs"
    (all (s: fs.${s.mount_point}.options == [ "subvol=${s.name}" ] && fs.${s.mount_point}.device == device && fs.${s.mount_point}.fsType == "btrfs") tacidLib.mounted))
  (check "the snapshot store is not needed for boot, the rest is"
    (all (s: fs.${s.mount_point}.neededForBoot == (s.name != layout.snapshots_subvolume)) tacidLib.mounted))
  (check "the root, the snapshot store and the restorable subvolumes are all mounted"
    (all (n: elem n mountedNames) ([ root layout.snapshots_subvolume ] ++ map (s: s.name) tacidLib.restorableMounted)))
  (check "the snapshot store is mounted where the layout says"
    (fs ? ${layout.snapshots_mount_point}))
  (check "a correct configuration passes every assertion" (failing { } == [ ]))
  (check "without the systemd initrd exactly one assertion fails, naming the option"
    (failsOnce { initrdSystemd = false; } "boot.initrd.systemd.enable must be true"))
  (check "an ext4 root fails, naming fileSystems.\"/\" and the fix"
    (failsOnce { fileSystems = fs // { ${rootMount} = fs.${rootMount} // { fsType = "ext4"; }; }; } "fileSystems.\"${rootMount}\" must be the Btrfs subvolume ${root}.*not \"btrfs\".*remove"))
  (check "a root on another device fails"
    (failsOnce { fileSystems = fs // { ${rootMount} = fs.${rootMount} // { device = "/dev/sda2"; }; }; } "its device is \"/dev/sda2\""))
  (check "a root on the wrong subvolume fails"
    (failsOnce { fileSystems = fs // { ${rootMount} = fs.${rootMount} // { options = [ "subvol=root" ]; }; }; } "subvol=root"))
  (check "subvol=/@root is the same subvolume"
    (failing { fileSystems = fs // { ${rootMount} = fs.${rootMount} // { options = [ "subvol=/${root}" "noatime" ]; }; }; } == [ ]))
  (check "a missing mount fails"
    (failsOnce { fileSystems = removeAttrs fs [ layout.snapshots_mount_point ]; } "it is not declared"))
  (check "snapshotting the snapshot store before a switch is refused"
    (failsOnce { preSwitchSubvolumes = [ layout.snapshots_subvolume ]; } "preSwitchSnapshot.subvolumes"))
  (check "an approver group that does not exist is refused"
    (failsOnce { approverGroup = "nobody-has-this-group"; } "services.tacid.approverGroup"))
  (check "the default snapshot set is snapshottable and restorable"
    (all (n: elem n tacidLib.snapshottable) tacidLib.snapshotByDefault
      && tacidLib.snapshotByDefault == map (s: s.name) (filter (s: s.restorable) layout.subvolumes)))
  (check "unit attribute names are the unit names without .service"
    (all (u: "${tacidLib.serviceAttrName u}.service" == u)
      [ layout.stem_unit layout.keeper_unit layout.initrd_restore_unit layout.initrd_wipe_root_unit ]))
  (check "the default device needs no kernel parameter; another one does"
    (tacidLib.kernelParamsFor device == [ ] && tacidLib.kernelParamsFor "/dev/vdb" == [ "${layout.kernel_device_key}=/dev/vdb" ]))
  (check "the keeper's directory on the snapshot store belongs to the keeper, 0700"
    (any (r: r == "d ${layout.snapshots_mount_point}/${layout.keeper_dir} 0700 ${layout.keeper_user} ${layout.keeper_user} -") tacidLib.tmpfilesRules))
  (check "the package installs every shipped file"
    (all (e: contains (tacidLib.sourcePath e) tacidLib.installCommands) shipped.files))
  (check "both initrd units are shipped"
    (all (u: any (e: tacidLib.fileName e == u) shipped.files) tacidLib.initrdUnits))
  (check "the pre-switch check takes a pre-switch snapshot set with a reason"
    (contains "data snapshot --pre-switch" preSwitch && contains "--reason \"[$]reason\"" preSwitch
      && contains "reason=\"before switching\"" preSwitch))
  (check "the pre-switch check says how to switch anyway"
    (contains "touch /run/skip" preSwitch))
]
