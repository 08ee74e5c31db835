# The tacid package, for any system nixpkgs builds Rust for:
#   pkgs.callPackage ./nixos-modules/package.nix { }
# The flake's packages.<system>.default and the module's services.tacid.package default
# are both this, built with the package set of the machine that evaluates it.
{ lib
, rustPlatform
, installShellFiles
, coreutils
}:
let
  tacidLib = import ./lib.nix;
  workspace = (builtins.fromTOML (builtins.readFile ../Cargo.toml)).workspace.package;
  buildOutputs = [ "target" "fuzz/target" "fuzz/corpus" "fuzz/artifacts" "checks/boot/cache" ];
  restorable = lib.concatMapStringsSep ", " (s: s.mount_point) tacidLib.restorableMounted;

  # The packages of the tools the shipped units name (shipped.json unit_paths.tools maps
  # each tool to its package's attribute name).
  toolPackages = { inherit coreutils; };
  toolPath =
    tool: pkg:
    if toolPackages ? ${pkg} then
      "${toolPackages.${pkg}}/bin/${tool}"
    else
      throw "nixos-modules/package.nix: shipped.json's unit_paths.tools names the package ${pkg} for ${tool}; add ${pkg} to this file's arguments and toolPackages";
in
rustPlatform.buildRustPackage {
  pname = "tacid";
  inherit (workspace) version;
  # The repository without what a developer's build and tests leave in it (what
  # .gitignore names: cargo's target/, the boot tier's cache, fuzzing's corpus, disk
  # images; cleanSource drops VCS files and `nix build` result links), which a `path:`
  # input would otherwise copy into the store with the sources.
  src = lib.cleanSourceWith {
    src = lib.cleanSource ../.;
    filter = path: _type:
      let
        rel = lib.removePrefix "${toString ../.}/" (toString path);
      in
        !(builtins.elem rel buildOutputs || lib.hasSuffix ".img" rel);
  };
  # The workspace's tacid-stem, tacid-keeper, tacid and tacid-initrd. rusqlite is
  # bundled (SQLite compiled in), so no system sqlite is needed.
  cargoLock.lockFile = ../Cargo.lock;
  # Only the binaries a machine runs (not the test and doc tools of the workspace).
  cargoBuildFlags = lib.concatMap (b: [ "--bin" b.name ]) (builtins.attrValues tacidLib.shipped.binaries);
  nativeBuildInputs = [ installShellFiles ];
  # The tests need root, loop devices and a system-like bus; they run in the
  # project's CI tiers and, on NixOS, as checks.install. Not in the build sandbox.
  doCheck = false;
  # Units and D-Bus files exactly as they are in the repository (shipped.json).
  # Their /usr/bin paths become store paths (shipped.json lists the tools).
  postInstall = ''
    ${tacidLib.installCommands}
    ${tacidLib.rewriteUnitPaths (lib.mapAttrs toolPath tacidLib.shipped.unit_paths.tools)}
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
}
