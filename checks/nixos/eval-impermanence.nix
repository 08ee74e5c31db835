# The tacid module beside the impermanence module (nix-community/impermanence, its
# nixos.nix unmodified), on nixpkgs' module system with the upstream declarations
# (./nixos-eval.nix), with a configuration that persists directories and files through it:
#   nix-instantiate --eval --strict --json checks/nixos/eval-impermanence.nix \
#     --arg nixpkgsLib ../shared/nixpkgs-lib/lib --arg nixosSubset ../shared/nixos-subset \
#     --arg impermanence ../shared/nixos-subset/impermanence
# gives { checks = true; }, or fails with the check that did not hold.
{ nixpkgsLib ? ../../../shared/nixpkgs-lib/lib
, nixosSubset ? ../../../shared/nixos-subset
, impermanence ? ../../../shared/nixos-subset/impermanence
}:
let
  nixos = import ./nixos-eval.nix { inherit nixpkgsLib nixosSubset; };
  inherit (nixos) lib;
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout persistDir;
  inherit (builtins) all filter map;
  inherit (lib) hasInfix;

  check = what: ok: if ok then true else throw "eval-impermanence: ${what}";

  machine = settings: persistence: extra: nixos.eval {
    system = "x86_64-linux";
    modules = [
      (impermanence + "/nixos.nix")
      ../../nixos-modules/tacid.nix
      {
        services.tacid = { enable = true; } // settings;
        boot.initrd.systemd.enable = true;
        environment.persistence = persistence;
        users.users.talyz.isNormalUser = true;
      }
      extra
    ];
  };
  failing = config: map (a: a.message) (filter (a: !a.assertion) config.assertions);

  # As impermanence's README has it, on tacid's persistent subvolume, with the uid map
  # kept by impermanence instead of tacid.
  persisted = {
    ${persistDir} = {
      hideMounts = true;
      directories = [
        "/var/lib/nixos"
        "/var/lib/bluetooth"
        "/etc/NetworkManager/system-connections"
        { directory = "/var/lib/colord"; user = "colord"; group = "colord"; mode = "u=rwx,g=rx,o="; }
      ];
      files = [
        { file = "/etc/nix/id_rsa"; parentDirectory = { mode = "u=rwx,g=,o="; }; }
      ];
      users.talyz = {
        directories = [ "Documents" { directory = ".ssh"; mode = "0700"; } ];
        files = [ ".screenrc" ];
      };
    };
  };
  good = (machine { persistEssentials.nixosIds = false; } persisted { }).config;
  units = good.boot.initrd.systemd.units;
  # The unit impermanence makes for /var/lib/nixos in the initrd (a path needed for boot).
  nixosIdsMount = "sysroot-var-lib-nixos.mount";
  # What impermanence sets, forced as a machine would: its units and mounts, rendered.
  systemdLib = (machine { } { } { })._module.args.utils.systemdUtils.lib;
  impermanenceUnits = lib.filterAttrs (n: _: lib.hasPrefix "persist-" n) good.systemd.services;

  problems = settings: persistence: failing (machine settings persistence { }).config;
  mentions = words: msgs: lib.any (m: all (w: hasInfix w m) words) msgs;
in
{
  checks = all (x: x) [
    (check "tacid with impermanence persisting directories and files: every assertion holds, tacid's and impermanence's: ${toString (failing good)}"
      (failing good == [ ]))
    (check "and no warnings: ${toString good.warnings}" (good.warnings == [ ]))
    (check "what impermanence sets evaluates: its initrd mount, its mounts and services, rendered"
      (nixos.force units.${nixosIdsMount}
        && all (m: nixos.force (systemdLib.mountToUnit m)) good.systemd.mounts
        && impermanenceUnits != { }
        && all (s: nixos.force (systemdLib.serviceToUnit s)) (builtins.attrValues impermanenceUnits)))
    (check "impermanence binds the uid map under /sysroot in the initrd, before activation (the unit tacid orders itself before)"
      (hasInfix "Before=initrd-nixos-activation.service" units.${nixosIdsMount}.text
        && hasInfix "Where=/sysroot/var/lib/nixos" units.${nixosIdsMount}.text
        && hasInfix "What=/sysroot${persistDir}/var/lib/nixos" units.${nixosIdsMount}.text))
    (check "both tacid initrd units, rendered, are ordered before impermanence's initrd mount and its older create-needed-for-boot-dirs.service"
      (all
        (u: hasInfix "Before=create-needed-for-boot-dirs.service" units.${u}.text && hasInfix nixosIdsMount units.${u}.text)
        tacidLib.initrdUnits))
    (check "with tacid keeping the uid map (the default), impermanence does not warn that it is not persisted"
      ((machine { } { ${persistDir}.directories = [ "/var/lib/bluetooth" ]; } { }).config.warnings == [ ]))
    (check "/var/log persisted through impermanence: the assertion names environment.persistence and the fix"
      (mentions [ "environment.persistence.\"${persistDir}\".directories has \"/var/log\"" "@log" "Remove \"/var/log\"" ]
        (problems { } { ${persistDir}.directories = [ "/var/log" ]; })))
    (check "a directory above a tacid mount (/var, above /var/log) fails the same way"
      (mentions [ "has \"/var\"" "/var/log (@log)" ] (problems { } { ${persistDir}.directories = [ "/var" ]; })))
    (check "/persistent, no filesystem of its own: the assertion names environment.persistence.\"/persistent\" and the fix"
      (mentions [ "environment.persistence.\"/persistent\"" "no filesystem of its own" "environment.persistence.\"${persistDir}\"" "fileSystems.\"/persistent\"" ]
        (problems { } { "/persistent".directories = [ "/var/lib/bluetooth" ]; })))
    (check "/persistent as a filesystem of its own, mounted for boot: accepted"
      (failing
        (machine { } { "/persistent".directories = [ "/var/lib/bluetooth" ]; } {
          fileSystems."/persistent" = { device = "/dev/disk/by-label/other"; fsType = "ext4"; neededForBoot = true; };
        }).config == [ ]))
    (check "/persistent on a root kept as it is (ephemeralRoot = false): accepted"
      (problems { ephemeralRoot = false; } { "/persistent".directories = [ "/var/lib/bluetooth" ]; } == [ ]))
    (check "a store inside tacid's snapshot store is refused"
      (mentions [ "inside tacid's snapshot store" ] (problems { } { "${layout.snapshots_mount_point}/x".directories = [ "/var/lib/bluetooth" ]; })))
    (check "the uid map or the machine id kept by both tacid and impermanence: the assertion says which option to turn off"
      (mentions [ "/var/lib/nixos is kept" "services.tacid.persistEssentials.nixosIds = false" ] (problems { } persisted)
        && mentions [ "/etc/machine-id is kept" "services.tacid.persistEssentials.machineId = false" ]
        (problems { persistEssentials.nixosIds = false; } { ${persistDir}.files = [ "/etc/machine-id" ]; })))
    (check "a host key tacid copies inside a directory impermanence binds (\"/etc/ssh\"): the assertion names the directory and the option"
      (mentions [ "/etc/ssh/ssh_host_ed25519_key is kept" "(as \"/etc/ssh\")" "services.tacid.persistEssentials.sshHostKeys = false" "remove \"/etc/ssh\"" ]
        (problems { persistEssentials.nixosIds = false; } { ${persistDir}.directories = [ "/etc/ssh" ]; })))
    (check "a directory of impermanence's inside one tacid binds (/var/lib/systemd/coredump, from its README) is no conflict"
      (problems { } { ${persistDir}.directories = [ "/var/lib/systemd/coredump" ]; } == [ ]))
    (check "a store that is turned off is not checked"
      (problems { } { "/persistent" = { enable = false; directories = [ "/var/log" ]; }; } == [ ]))
  ];
}
