# Evaluates NixOS modules the way nixos/lib/eval-config.nix does, on the real module
# system (nixpkgs' lib.evalModules, `_module.check` on), with the upstream NixOS modules
# that declare what the tacid module sets (users, file systems, assertions, the systemd
# initrd, the pre-switch checks), the declarations ./upstream-declarations.nix adds for
# the rest, and a stand-in package set (./stand-in-pkgs.nix) in place of nixpkgs.
#
# The two inputs are parameters, so that elsewhere a nixpkgs checkout (or a flake's
# nixpkgs input) serves: `nixpkgsLib` is nixpkgs' lib/ directory, `nixosSubset` a
# directory holding nixos/lib and nixos/modules at their upstream paths (a nixpkgs
# checkout is one). checks/nix-checks.sh passes them from TACID_NIXPKGS_LIB and
# TACID_NIXOS_SUBSET; their default is ../shared next to the repository.
{ nixpkgsLib, nixosSubset }:
let
  lib = import nixpkgsLib;

  upstreamModules = map (p: nixosSubset + "/nixos/modules/${p}") [
    "config/users-groups.nix"
    "tasks/filesystems.nix"
    "misc/assertions.nix"
    "misc/ids.nix"
    "system/activation/pre-switch-check.nix"
    "system/boot/systemd/initrd.nix"
  ];

  # What nixos/modules/misc/extra-arguments.nix and misc/nixpkgs.nix give every module.
  arguments =
    pkgs:
    { config, ... }:
    {
      _module.args = {
        inherit pkgs;
        utils = import (nixosSubset + "/nixos/lib/utils.nix") { inherit lib config pkgs; };
      };
    };
  forceValue =
    v:
    if lib.isDerivation v then
      builtins.seq (builtins.stringLength v.outPath) true
    else if builtins.isAttrs v then
      builtins.foldl' (ok: x: builtins.seq (forceValue x) ok) true (builtins.attrValues v)
    else if builtins.isList v then
      builtins.foldl' (ok: x: builtins.seq (forceValue x) ok) true v
    else
      builtins.seq v true;

  # A definition without its properties: mkIf, mkMerge, mkOverride (mkDefault, mkForce)
  # and mkOrder, as lib/modules.nix discharges them; a false mkIf sets nothing.
  strip =
    def:
    let
      type = def._type or null;
    in
    if type == "if" then
      (if def.condition then strip def.content else { })
    else if type == "merge" then
      builtins.foldl' (acc: d: acc // strip d) { } def.contents
    else if type == "override" || type == "order" then
      strip def.content
    else
      def;

  forceDefinedIn =
    def: value:
    let
      d = strip def;
    in
    if builtins.isAttrs d && !lib.isDerivation d && !(d ? _type) then
      builtins.foldl' (ok: name: builtins.seq (forceDefinedIn d.${name} value.${name}) ok) true
        (
          builtins.attrNames d
        )
    else
      forceValue value;
in
{
  inherit lib;

  # The stand-in package set for one system.
  pkgsFor = system: import ./stand-in-pkgs.nix { inherit lib system; };

  # evalModules over the upstream modules, the added declarations and `modules`.
  eval =
    { system, modules }:
    lib.evalModules {
      modules =
        upstreamModules
        ++ [
          ./upstream-declarations.nix
          (arguments (import ./stand-in-pkgs.nix { inherit lib system; }))
        ]
        ++ modules;
    };

  # Forces a value all the way down, as `builtins.deepSeq` does, except that a derivation
  # counts as its store path: its value in an option is that path, and forcing the rest
  # (its sources) would copy files to the store. True, or the first error.
  force = forceValue;

  # Forces, in `value` (an option's merged value), everything the definition `def` sets:
  # into the attributes it names (of a submodule, say: its other options keep their
  # defaults unforced, as the module system leaves an option nobody defined unevaluated),
  # and all the way down from each leaf it sets.
  forceDefined = forceDefinedIn;

  # What `module` sets in the evaluation `result`: for each option it names, the option
  # and the module's own definition of it, found by walking the module's `config`
  # (properties such as mkIf taken as the module system takes them). Nothing else is
  # evaluated on the way, as computing every option's merged definitions would.
  definitionsOf =
    module: result:
    let
      args = result._module.args // {
        inherit lib;
        inherit (result) config options;
      };
      walk =
        options: defs:
        if (defs._type or null) == "if" then
          (if defs.condition then walk options defs.content else [ ])
        else if (defs._type or null) == "merge" then
          lib.concatMap (walk options) defs.contents
        else
          lib.concatLists (
            lib.mapAttrsToList
              (
                name: def:
                if lib.isOption options.${name} then
                  [
                    {
                      option = options.${name};
                      definition = def;
                      # The module's definition alone, merged by the option's own type (its
                      # checks, its submodules with their defaults), as the module system
                      # merges every definition.
                      value =
                        (lib.modules.mergeDefinitions options.${name}.loc options.${name}.type [
                          {
                            file = toString module;
                            value = def;
                          }
                        ]).mergedValue;
                    }
                  ]
                else
                  walk options.${name} def
              )
              defs
          );
    in
    walk result.options ((import module args).config or { });
}
