{
  description = "tacid: Btrfs snapshots of a NixOS machine's data that the next boot can put back";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      # The systems the flake builds for; NixOS on Btrfs is common on both.
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      packages = forAllSystems (pkgs: {
        # The same package the module builds by default (nixos-modules/package.nix).
        default = pkgs.callPackage ./nixos-modules/package.nix { };
        # scripts/make-disk-layout.sh with what it needs, for an installer:
        #   nix run .#make-disk-layout -- /dev/DISK
        make-disk-layout = pkgs.writeShellApplication {
          name = "make-disk-layout";
          runtimeInputs = with pkgs; [ btrfs-progs util-linux jq coreutils gnugrep gnused ];
          text = ''
            export TACID_LAYOUT_JSON=${./nixos-modules/layout.json}
            exec ${pkgs.bash}/bin/bash ${./scripts/make-disk-layout.sh} "$@"
          '';
        };
      });

      # Independent of any system: the module builds its package with the package set of
      # the machine it configures (services.tacid.package), whatever system evaluates it.
      # An attribute set that imports the file, not the bare path: `nix flake check` rejects
      # a path ("module must be a function or an attribute set"; Debian's Nix 2.8 does, and
      # checks/nix-checks.sh runs it), and `imports` (unlike `import`) keeps the file's name
      # in the module system's messages, as nixpkgs' own nixosModules do.
      nixosModules.default = { imports = [ ./nixos-modules/tacid.nix ]; };

      checks = forAllSystems (pkgs: {
        install = pkgs.testers.runNixOSTest (import ./checks/nixos/install.nix {
          tacidModule = self.nixosModules.default;
          makeDiskLayout = self.packages.${pkgs.stdenv.hostPlatform.system}.make-disk-layout;
        });
      });

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          inputsFrom = [ self.packages.${pkgs.stdenv.hostPlatform.system}.default ];
          packages = with pkgs; [
            cargo
            rustc
            clippy
            rustfmt
            btrfs-progs
            dbus
            jq
            qemu
            nixpkgs-fmt
            deadnix
          ];
        };
      });

      formatter = forAllSystems (pkgs: pkgs.nixpkgs-fmt);
    };
}
