# A stand-in for nixpkgs' package set, for evaluating the module and the flake where no
# nixpkgs checkout exists: every package and builder is a fake derivation (an attribute set
# with `type = "derivation"` and a store-path-like `outPath`). Nothing here can be built,
# and nothing that evaluates against it forces a build; the builders keep what they were
# given (`text`, `script`, the arguments of buildRustPackage) so the checks can read it.
#
#   import ./stand-in-pkgs.nix { lib = import <nixpkgs-lib>; system = "x86_64-linux"; }
{ lib, system }:
let
  # A fake derivation named `name`, carrying `attrs`. Its store path hashes the name and
  # the system, so the same package differs between systems, as a real one would.
  fake =
    name: attrs:
    let
      # In the characters of a store path's hash (Nix's base 32 has no e, o, t or u).
      hash = builtins.replaceStrings [ "e" ] [ "z" ] (builtins.substring 0 32 (builtins.hashString "sha256" "${system}-${name}"));
      self = {
        type = "derivation";
        inherit name system;
        outPath = "/nix/store/${hash}-${name}";
        drvPath = "/nix/store/${hash}-${name}.drv";
        outputName = "out";
        outputs = [ "out" ];
        out = self;
        meta = { };
        overrideAttrs = f: fake name (attrs // (if builtins.isFunction f then f self else f));
        passthru = { };
      }
      // attrs;
    in
    self;

  # A package of nixpkgs that the copied NixOS modules or the module name by attribute.
  package = name: fake name { pname = name; version = "0-stand-in"; };

  # The builders of pkgs/build-support/trivial-builders that the evaluated modules call.
  writers = {
    runCommand = name: env: script: fake name (env // { inherit script; });
    runCommandLocal = name: env: script: fake name (env // { inherit script; });
    writeText = name: text: fake name { inherit text; };
    writeTextFile = args: fake args.name args;
    writeTextDir = path: text: fake (baseNameOf path) { inherit path text; };
    writeScript = name: text: fake name { inherit text; };
    writeShellScript = name: text: fake name { inherit text; };
    writeShellScriptBin = name: text: fake name { inherit text; meta.mainProgram = name; };
    writeShellApplication = args: fake args.name (args // { meta.mainProgram = args.name; });
    symlinkJoin = args: fake args.name args;
    buildEnv = args: fake args.name args;
    makeInitrdNG = args: fake "initrd" args;
    makeModulesClosure = args: fake "kernel-modules" args;
  };

  packageNames = [
    "bash"
    "bashInteractive"
    "btrfs-progs"
    "cargo"
    "chroot"
    "chroot-realpath"
    "clippy"
    "coreutils"
    "dbus"
    "deadnix"
    "dosfstools"
    "findutils"
    "fish"
    "glibc"
    "gnugrep"
    "gnused"
    "installShellFiles"
    "jq"
    "kmod"
    "less"
    "libxcrypt"
    "nixpkgs-fmt"
    "openssh"
    "perl"
    "qemu"
    "rustc"
    "rustfmt"
    "shadow"
    "systemd"
    "util-linux"
    "xonsh"
    "zsh"
  ];

  pkgs =
    lib.genAttrs packageNames package
    // writers
    // {
      inherit lib;
      # `pkgs.callPackage f overrides` as nixpkgs does it: the function's named arguments
      # from this set, then the overrides.
      callPackage =
        fn: overrides:
        let
          f = if builtins.isFunction fn then fn else import fn;
        in
        f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // overrides);
      rustPlatform.buildRustPackage = args: fake "${args.pname}-${args.version}" args;
      mkShell = args: fake "shell" args;
      # A VM test as a derivation that keeps the test's attributes (nodes, testScript).
      testers.runNixOSTest = test: fake test.name test;
      buildPackages = pkgs;
      runtimeShell = "${pkgs.bash}/bin/bash";
      stdenv.hostPlatform = {
        inherit system;
        isLinux = true;
      };
      xorg.lndir = package "lndir";
      # What the copied initrd.nix and users-groups.nix read of these packages.
      systemd = package "systemd" // {
        withEfi = true;
        kmod = package "kmod";
        util-linux = package "util-linux";
      };
      libxcrypt = package "libxcrypt" // {
        enabledCryptSchemeIds = [ "y" "gy" "7" "2b" "2y" "2a" "6" "5" "1" ];
      };
      perl = package "perl" // { withPackages = _: package "perl-with-packages"; };
    };
in
pkgs
