# A stand-in for the nixpkgs flake, so that Nix's own `nix flake check` can run on the
# tacid flake offline: checks/nix-checks.sh copies this file as flake.nix into a scratch
# directory, next to nixpkgs' real lib (./lib) and ./stand-in-pkgs.nix, and overrides the
# tacid flake's nixpkgs input with that directory. Nothing here builds.
{
  description = "stand-in nixpkgs: the real lib, fake derivations";

  outputs = _: {
    lib = import ./lib;
    legacyPackages = (import ./lib).genAttrs [ "x86_64-linux" "aarch64-linux" ]
      (system: import ./stand-in-pkgs.nix { lib = import ./lib; inherit system; });
  };
}
