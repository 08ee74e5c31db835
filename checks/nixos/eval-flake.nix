# Evaluates flake.nix offline against a stand-in for nixpkgs that records what it is
# given, and renders the VM test's Python with stand-in node values:
#   nix-instantiate --eval --strict --json checks/nixos/eval-flake.nix
# gives { checks = true; testScript = "..."; }; checks/nix-checks.sh then parses the
# Python. The real evaluation (`nix flake check`) needs nixpkgs; this catches a wrong
# name or a broken string here.
let
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout shipped;
  inherit (builtins) all attrNames attrValues elem map;

  check = what: ok: if ok then true else throw "eval-flake: ${what}";

  drv = kind: args: args // { type = "derivation"; inherit kind; outPath = "/nix/store/00000000000000000000000000000000-${kind}"; };
  tool = name: "/nix/store/00000000000000000000000000000000-${name}";

  stubLib = {
    inherit (builtins) mapAttrs concatMap;
    concatMapStringsSep = sep: f: list: builtins.concatStringsSep sep (map f list);
    cleanSource = src: src;
    licenses = { mit = "mit"; asl20 = "asl20"; };
    platforms.linux = [ "x86_64-linux" ];
  };
  pkgs = builtins.listToAttrs
    (map (name: { inherit name; value = tool name; }) [
      "btrfs-progs"
      "util-linux"
      "jq"
      "coreutils"
      "gnugrep"
      "gnused"
      "cargo"
      "rustc"
      "clippy"
      "rustfmt"
      "dbus"
      "qemu"
      "nixpkgs-fmt"
      "deadnix"
      "installShellFiles"
      "bash"
    ]) // {
    lib = stubLib;
    rustPlatform.buildRustPackage = drv "package";
    testers.runNixOSTest = test: test;
    writeShellApplication = drv "script";
    mkShell = drv "shell";
  };
  nixpkgs.legacyPackages.x86_64-linux = pkgs;

  flake = import ../../flake.nix;
  outputs = flake.outputs { inherit self nixpkgs; };
  self = outputs;
  package = outputs.packages.x86_64-linux.default;

  test = outputs.checks.x86_64-linux.install;
  toplevel = name: "/nix/store/00000000000000000000000000000000-nixos-system-machine-${name}";
  specialisation = name: {
    system.build.toplevel = toplevel name;
    services.tacid = {
      fileSystems = tacidLib.fileSystemsFor layout.default_device;
      preSwitchSnapshot.subvolumes = tacidLib.snapshotByDefault;
    };
  };
  testScript = test.testScript {
    nodes.machine.specialisation = {
      tacid.configuration = specialisation "tacid";
      tacid-next.configuration = specialisation "tacid-next";
    };
  };
in
{
  checks = all (x: x) [
    (check "the flake says what it is" (builtins.isString flake.description))
    (check "the package builds exactly the shipped binaries"
      (package.cargoBuildFlags == builtins.concatMap (b: [ "--bin" b.name ]) (attrValues shipped.binaries)))
    (check "the package builds against the committed Cargo.lock" (package ? cargoLock))
    (check "the package's version is the workspace's"
      (package.version == (builtins.fromTOML (builtins.readFile ../../Cargo.toml)).workspace.package.version))
    (check "the package installs the shipped files and rewrites the units' paths"
      (builtins.match ".*${builtins.replaceStrings [ "$" ] [ "\\$" ] (builtins.head (builtins.split "\n" tacidLib.installCommands))}.*sed -i.*" package.postInstall != null))
    (check "the package's CLI is its main program" (package.meta.mainProgram == shipped.binaries.cli.name))
    (check "the flake exports the module, the package, the check, a shell and a formatter"
      (attrNames outputs == [ "checks" "devShells" "formatter" "nixosModules" "packages" ]))
    (check "the disk script is a package of its own, given the committed layout"
      (outputs.packages.x86_64-linux.make-disk-layout.name == "make-disk-layout"
        && builtins.match ".*TACID_LAYOUT_JSON=.*layout.json.*" outputs.packages.x86_64-linux.make-disk-layout.text != null))
    (check "the VM test has one machine and is named"
      (attrNames test.nodes == [ "machine" ] && test.name == "tacid-install"))
    (check "the test names the next configuration's toplevel"
      (builtins.match ".*${toplevel "tacid-next"}/bin/switch-to-configuration test.*" testScript != null))
    (check "the test takes the story's file from a restorable subvolume"
      (elem (builtins.head tacidLib.restorableMounted).name tacidLib.snapshotByDefault))
  ];
  inherit testScript;
}
