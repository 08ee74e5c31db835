{
  description = "tacid: Btrfs snapshots of a NixOS machine's data that the next boot can put back";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      inherit (pkgs) lib;
      tacidLib = import ./nixos-modules/lib.nix;
      restorable = lib.concatMapStringsSep ", " (s: s.mount_point) tacidLib.restorableMounted;
      workspace = (builtins.fromTOML (builtins.readFile ./Cargo.toml)).workspace.package;

      tacid = pkgs.rustPlatform.buildRustPackage {
        pname = "tacid";
        inherit (workspace) version;
        src = lib.cleanSource ./.;
        # The workspace's tacid-stem, tacid-keeper, tacid and tacid-initrd. rusqlite is
        # bundled (SQLite compiled in), so no system sqlite is needed.
        cargoLock.lockFile = ./Cargo.lock;
        # Only the binaries a machine runs (not the test and doc tools of the workspace).
        cargoBuildFlags = lib.concatMap (b: [ "--bin" b.name ]) (builtins.attrValues tacidLib.shipped.binaries);
        nativeBuildInputs = [ pkgs.installShellFiles ];
        # The tests need root, loop devices and a system-like bus; they run in the
        # project's CI tiers and, on NixOS, as checks.install. Not in the build sandbox.
        doCheck = false;
        # Units and D-Bus files exactly as they are in the repository (shipped.json).
        # Their /usr/bin paths become store paths (shipped.json lists the tools).
        postInstall = ''
          ${tacidLib.installCommands}
          ${tacidLib.rewriteUnitPaths (lib.mapAttrs (tool: pkg: "${pkgs.${pkg}}/bin/${tool}") tacidLib.shipped.unit_paths.tools)}
          installManPage tacid-cli/man/*.1
          installShellCompletion --cmd ${tacidLib.shipped.binaries.cli.name} \
            --bash tacid-cli/completions/tacid.bash \
            --zsh tacid-cli/completions/_tacid \
            --fish tacid-cli/completions/tacid.fish
        '';
        meta = {
          description = "Snapshots of ${restorable} that the next boot can put back";
          mainProgram = tacidLib.shipped.binaries.cli.name;
          license = with lib.licenses; [ mit asl20 ];
          platforms = lib.platforms.linux;
        };
      };
    in
    {
      packages.${system} = {
        default = tacid;
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
      };

      nixosModules.default = { lib, pkgs, ... }: {
        imports = [ ./nixos-modules/tacid.nix ];
        services.tacid.package = lib.mkDefault self.packages.${pkgs.stdenv.hostPlatform.system}.default;
      };

      checks.${system}.install = pkgs.testers.runNixOSTest (import ./checks/nixos/install.nix {
        tacidModule = self.nixosModules.default;
        makeDiskLayout = self.packages.${system}.make-disk-layout;
      });

      devShells.${system}.default = pkgs.mkShell {
        inputsFrom = [ tacid ];
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

      formatter.${system} = pkgs.nixpkgs-fmt;
    };
}
