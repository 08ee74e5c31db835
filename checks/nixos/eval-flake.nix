# Evaluates flake.nix offline for both of its systems, against a stand-in nixpkgs: nixpkgs'
# real lib and a stand-in package set per system (./stand-in-pkgs.nix); evaluates its
# nixosModules.default on the real module system for each system (./nixos-eval.nix); and
# renders the VM test's Python with the node values of that evaluation:
#   nix-instantiate --eval --strict --json checks/nixos/eval-flake.nix \
#     --arg nixpkgsLib ../shared/nixpkgs-lib/lib --arg nixosSubset ../shared/nixos-subset
# gives { checks = true; testScript = "..."; }; checks/nix-checks.sh then lints and
# type-checks the Python as the NixOS test driver does. The real evaluation
# (`nix flake check`) needs nixpkgs; this catches a wrong name, a system-bound output or a
# broken string here.
{ nixpkgsLib ? ../../../shared/nixpkgs-lib/lib
, nixosSubset ? ../../../shared/nixos-subset
}:
let
  nixos = import ./nixos-eval.nix { inherit nixpkgsLib nixosSubset; };
  inherit (nixos) lib;
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout shipped;
  inherit (builtins) all attrNames attrValues elem;

  check = what: ok: if ok then true else throw "eval-flake: ${what}";

  systems = [ "x86_64-linux" "aarch64-linux" ];
  nixpkgs = {
    inherit lib;
    legacyPackages = lib.genAttrs systems nixos.pkgsFor;
  };

  flake = import ../../flake.nix;
  outputs = flake.outputs { inherit self nixpkgs; };
  self = outputs;

  # nixosModules.default in a machine of `system`, as the README has a user write it.
  machineOn = system: extra: nixos.eval {
    inherit system;
    modules = [
      outputs.nixosModules.default
      { services.tacid.enable = true; boot.initrd.systemd.enable = true; }
      extra
    ];
  };

  perSystem = system:
    let
      package = outputs.packages.${system}.default;
      machine = (machineOn system { }).config;
      test = outputs.checks.${system}.install;
    in
    [
      (check "${system}: the package is built with ${system}'s package set"
        (package.system == system && elem system package.meta.platforms))
      (check "${system}: the package builds exactly the shipped binaries"
        (package.cargoBuildFlags == builtins.concatMap (b: [ "--bin" b.name ]) (attrValues shipped.binaries)))
      (check "${system}: the package builds against the committed Cargo.lock" (package ? cargoLock))
      (check "${system}: the package's version is the workspace's"
        (package.version == (builtins.fromTOML (builtins.readFile ../../Cargo.toml)).workspace.package.version))
      (check "${system}: the package installs the shipped files and rewrites the units' paths"
        (lib.hasInfix (builtins.head (lib.splitString "\n" tacidLib.installCommands)) package.postInstall
          && lib.hasInfix "${nixpkgs.legacyPackages.${system}.coreutils}/bin/install " package.postInstall))
      (check "${system}: the package's CLI is its main program" (package.meta.mainProgram == shipped.binaries.cli.name))
      (check "${system}: the disk script is a package of its own, given the committed layout"
        (outputs.packages.${system}.make-disk-layout.name == "make-disk-layout"
          && builtins.match ".*TACID_LAYOUT_JSON=.*layout.json.*" outputs.packages.${system}.make-disk-layout.text != null))
      (check "${system}: nixosModules.default gives the machine ${system}'s package, the flake's own"
        (machine.services.tacid.package.system == system
          && machine.services.tacid.package.outPath == package.outPath))
      (check "${system}: nixosModules.default passes every assertion there"
        (builtins.filter (a: !a.assertion) machine.assertions == [ ]))
      (check "${system}: the VM test has one machine and is named"
        (attrNames test.nodes == [ "machine" ] && test.name == "tacid-install"))
      (check "${system}: a development shell and a formatter"
        (outputs.devShells.${system}.default.name == "shell" && outputs.formatter.${system}.name == "nixpkgs-fmt"))
    ];

  # The VM test's script, rendered with the values of the tacid configuration as the real
  # module system makes them (the test reads its mounts and pre-switch set from there).
  test = outputs.checks.x86_64-linux.install;
  toplevel = name: "/nix/store/00000000000000000000000000000000-nixos-system-machine-${name}";
  specialisation = name: {
    system.build.toplevel = toplevel name;
    inherit ((machineOn "x86_64-linux" { }).config) services;
  };
  testScript = test.testScript {
    nodes.machine.specialisation = {
      tacid.configuration = specialisation "tacid";
      tacid-next.configuration = specialisation "tacid-next";
    };
  };
in
{
  checks = all (x: x) ([
    (check "the flake says what it is" (builtins.isString flake.description))
    (check "the flake exports the module, the packages, the check, a shell and a formatter"
      (attrNames outputs == [ "checks" "devShells" "formatter" "nixosModules" "packages" ]))
    (check "every per-system output is there for both systems, and only those"
      (all (o: attrNames outputs.${o} == lib.sort lib.lessThan systems) [ "checks" "devShells" "formatter" "packages" ]))
    # `nix flake check` of Nix 2.8 (Debian's) takes a module only as a function or an
    # attribute set; checks/nix-checks.sh runs that checker itself on the flake.
    (check "nixosModules.default is a module every Nix accepts (an attribute set importing the module file), not tied to a system"
      (outputs.nixosModules.default == { imports = [ ../../nixos-modules/tacid.nix ]; }))
    (check "the two systems' packages differ" (outputs.packages.x86_64-linux.default.outPath != outputs.packages.aarch64-linux.default.outPath))
    (check "the test names the next configuration's toplevel"
      (lib.hasInfix "${toplevel "tacid-next"}/bin/switch-to-configuration test" testScript))
    (check "the test's breaking drop-in sorts after the module's, so it wins"
      (lib.hasInfix "${layout.keeper_unit}.d/zz-" testScript && "zz-" > tacidLib.moduleDropIn))
    (check "the test takes the story's file from a restorable subvolume"
      (elem (builtins.head tacidLib.restorableMounted).name tacidLib.snapshotByDefault))
  ] ++ lib.concatMap perSystem systems);
  inherit testScript;
}
