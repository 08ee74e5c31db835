# The module's pre-switch fragment (nixos-modules/lib.nix preSwitchScript, with stand-in
# paths for the CLI, coreutils, the skip file, the system profiles and the running
# system), inside the script switch-to-configuration runs, as each of the two upstream
# generations of pre-switch-check.nix makes it:
#   nix-instantiate --eval --strict --json checks/nixos/pre-switch-scripts.nix \
#     --arg nixpkgsLib ../shared/nixpkgs-lib/lib --arg nixosSubset ../shared/nixos-subset \
#     --argstr tacid /x/tacid --argstr coreutils /usr --argstr skipFile /x/skip \
#     --argstr profilesDir /x/profiles --argstr currentSystem /x/running
# gives { older = "..."; newer = "..."; } for checks/nix-checks.sh to run under each
# contract of switch-to-configuration (adr/0009):
# - older: the copied nixos/modules/system/activation/pre-switch-check.nix itself (its
#   `apply` wraps each fragment in `( ... )` and makes `script` with writeShellScript);
#   switch-to-configuration of that era runs it with the toplevel only, NIXOS_ACTION set.
# - newer: pre-switch-check.nix as of NixOS/nixpkgs 39d144e17bb8 (not in the copies):
#   `if ! ( ... ) >&2; then ... fi` per fragment, in a pkgs.writeShellApplication, which
#   starts the script with errexit, nounset and pipefail and fails the build on any
#   shellcheck finding; run with the toplevel and the action.
{ nixpkgsLib ? ../../../shared/nixpkgs-lib/lib
, nixosSubset ? ../../../shared/nixos-subset
, tacid
, coreutils
, skipFile
  # Stand-ins for /nix/var/nix/profiles and /run/current-system.
, profilesDir
, currentSystem
}:
let
  nixos = import ./nixos-eval.nix { inherit nixpkgsLib nixosSubset; };
  tacidLib = import ../../nixos-modules/lib.nix;
  fragment = tacidLib.preSwitchScript {
    inherit tacid coreutils skipFile profilesDir currentSystem;
    snapshotArgs = tacidLib.snapshotByDefault;
  };
  name = "tacid";

  older = (nixos.eval {
    system = "x86_64-linux";
    modules = [{ system.preSwitchChecks.${name} = fragment; }];
  }).config.system.preSwitchChecks.script;
in
{
  # writeShellScript: the shebang, then the text.
  older = "#!/usr/bin/env bash\n" + older.text;
  # writeShellApplication: the shebang and its three options, then the text.
  newer = ''
    #!/usr/bin/env bash
    set -o errexit
    set -o nounset
    set -o pipefail

    # pre-switch check ${name}
    if ! (
      ${fragment}
    ) >&2 ; then
      echo "Pre-switch check '${name}' failed" >&2
      exit 1
    fi
  '';
}
