#!/usr/bin/env bash
# The Nix checks that run where Nix cannot build (no binary cache, no nixpkgs):
#   1. every .nix file parses (nix-instantiate --parse, Debian's nix-bin);
#   2. every .nix file is formatted (nixpkgs-fmt --check) and has no dead code (deadnix);
#   3. what the module derives from layout.json evaluates to what the JSON says
#      (checks/nixos/eval-lib.nix); the module itself on nixpkgs' real module system with
#      the upstream NixOS declarations of what it sets, every value it sets forced
#      (checks/nixos/eval-module.nix), and failing as it should where the types say no;
#      the flake's outputs for both systems against a stand-in nixpkgs
#      (checks/nixos/eval-flake.nix), whose rendering of the VM test's Python must pass
#      pyflakes and mypy as the NixOS test driver runs them; the module beside the real
#      impermanence module (checks/nixos/eval-impermanence.nix); Nix's own
#      `nix flake check --no-build` on a scratch copy of the flake, its nixpkgs input a
#      stand-in (nixpkgs' real lib, fake derivations);
#   4b. the essentials the module keeps on /persist: the initrd's and the running
#      system's scripts pass shellcheck and do their work on a stand-in root;
#   4. the pre-switch check behaves inside the script each generation of upstream's
#      pre-switch-check.nix makes, under the contract of the switch-to-configuration of
#      its day: skips, snapshots, stops the switch, lets it through once when told to,
#      run in bash against a stand-in CLI; the newer script passes shellcheck;
#   5. the package's install steps find every file they ship; the module's drop-ins keep
#      the shipped ExecStart but their values; the timeline service and timer, as shipped
#      and as the module makes them with the timeline off (prune only), pass
#      `systemd-analyze verify`;
#   6. scripts/make-disk-layout.sh makes the layout on a loop device (root), and refuses
#      a device with a filesystem unless --force.
# What does NOT run here: `nix flake check` against the real nixpkgs, the package build,
# the NixOS VM test (checks.install). They need Nix with nixpkgs and a builder.
#
# Inputs from outside the repository, as parameters (one nixpkgs checkout serves for both):
#   TACID_NIXPKGS_LIB   nixpkgs' lib/ directory; default ../shared/nixpkgs-lib/lib
#   TACID_NIXOS_SUBSET  a directory with nixos/lib and nixos/modules at their upstream
#                       paths; default ../shared/nixos-subset
#   TACID_IMPERMANENCE  nix-community/impermanence (its nixos.nix and what it imports);
#                       default $TACID_NIXOS_SUBSET/impermanence
# relative to the repository root. The .nix files under checks/nixos take them as
# --arg nixpkgsLib / --arg nixosSubset, with the same defaults.
#
# Exit non-zero on any failure. Under CI=true, a step that cannot run fails instead of
# being skipped.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
skip() {
  if [ "${CI:-}" = true ]; then
    fail "cannot run under CI=true: $*"
  else
    echo "!!!!!!!! SKIPPED (not a failure outside CI): $*" >&2
  fi
}
step() { echo "== $*"; }

export PATH="$HOME/.cargo/bin:$PATH"
# Nothing here builds, so no build users are needed; Debian's nix-bin defaults to the
# nixbld group, which exists only where nix-setup-systemd was installed, and otherwise
# warns on stderr, which the evaluation steps below count as failure.
export NIX_CONFIG="build-users-group ="

step "tools"
for pair in nix-instantiate:nix-bin jq:jq pyflakes3:pyflakes3 mypy:mypy shellcheck:shellcheck; do
  if ! command -v "${pair%%:*}" >/dev/null; then
    apt-get install -y -qq "${pair#*:}" >/dev/null || fail "cannot install ${pair#*:} (apt-get install ${pair#*:})"
  fi
done
for tool in nixpkgs-fmt deadnix; do
  if ! command -v "$tool" >/dev/null; then
    cargo install --locked -q "$tool" || fail "cannot install $tool (cargo install --locked $tool)"
  fi
done

mapfile -t nix_files < <(git ls-files --cached --others --exclude-standard -- '*.nix' | sort)
if [ "${#nix_files[@]}" -eq 0 ]; then fail "no .nix files found"; fi
echo "${#nix_files[@]} Nix files: ${nix_files[*]}"

step "parse"
for f in "${nix_files[@]}"; do
  nix-instantiate --parse "$f" >/dev/null || fail "$f does not parse"
done

step "format (nixpkgs-fmt --check)"
nixpkgs-fmt --check "${nix_files[@]}" || fail "not formatted; run: nixpkgs-fmt ${nix_files[*]}"

step "dead code (deadnix --fail)"
deadnix --fail "${nix_files[@]}" || fail "deadnix found unused code"

nixpkgs_lib="${TACID_NIXPKGS_LIB:-../shared/nixpkgs-lib/lib}"
nixos_subset="${TACID_NIXOS_SUBSET:-../shared/nixos-subset}"
upstream_args=()
impermanence="${TACID_IMPERMANENCE:-$nixos_subset/impermanence}"
if [ -f "$nixpkgs_lib/modules.nix" ] && [ -f "$nixos_subset/nixos/lib/utils.nix" ]; then
  upstream_args=(--arg nixpkgsLib "$(realpath "$nixpkgs_lib")" --arg nixosSubset "$(realpath "$nixos_subset")")
  echo "upstream: lib from $(realpath "$nixpkgs_lib"), NixOS modules from $(realpath "$nixos_subset")"
fi
# Evaluates checks/nixos/$1 on the upstream inputs into $work/$2; true when it evaluated,
# said nothing on stderr, and its checks are true.
eval_checks() {
  local file=checks/nixos/$1 out=$work/$2
  if ! nix-instantiate --eval --strict --json "$file" "${upstream_args[@]}" >"$out" 2>"$out.err" ||
    [ -s "$out.err" ]; then
    fail "$file: $(cat "$out.err")"
  elif [ "$(jq -r .checks "$out")" != true ]; then
    fail "$file: checks are not true"
  else
    return 0
  fi
  return 1
}
have_upstream() {
  if [ "${#upstream_args[@]}" -eq 0 ]; then
    skip "$1 needs nixpkgs' lib ($nixpkgs_lib) and the upstream NixOS modules ($nixos_subset); set TACID_NIXPKGS_LIB and TACID_NIXOS_SUBSET"
    return 1
  fi
}

step "evaluate what the module derives from layout.json"
result="$(nix-instantiate --eval --strict checks/nixos/eval-lib.nix 2>&1)"
if [ "$result" != true ]; then fail "checks/nixos/eval-lib.nix: $result"; else echo "checks/nixos/eval-lib.nix: true"; fi

work="$(mktemp -d)"
loop_dev=""
cleanup() {
  if [ -n "$loop_dev" ]; then losetup -d "$loop_dev" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "evaluate the module on nixpkgs' module system with upstream's declarations; force what it sets"
keeper_user="$(jq -r .keeper_user nixos-modules/layout.json)"
# The negative tests: each evaluation must fail, and with this error of the module system.
expect_eval_failure() {
  local what=$1 module=$2 message=$3
  if nix-instantiate --eval --strict --json checks/nixos/eval-module.nix "${upstream_args[@]}" \
    --arg extraModule "$module" >"$work/neg-out" 2>"$work/neg-err"; then
    fail "eval-module: $what must fail evaluation, but it evaluated: $(cat "$work/neg-out")"
  elif ! grep -qF -- "$message" "$work/neg-err"; then
    fail "eval-module: $what failed, but not with \"$message\": $(cat "$work/neg-err")"
  else
    echo "fails as it should: $what ($message)"
  fi
}
if have_upstream "evaluating the module on real types"; then
  if eval_checks eval-module.nix module.json; then
    echo "checks/nixos/eval-module.nix: true; forced: $(jq -r '.forced | join(" ")' "$work/module.json")"
  fi
  expect_eval_failure "a colon in the keeper's description (a passwd field)" \
    "{ lib, ... }: { users.users.\"$keeper_user\".description = lib.mkForce \"tacid keeper: consent\"; }" \
    "A definition for option \`users.users.$keeper_user.description' is not of type \`string, not containing newlines or colons'"
  expect_eval_failure "an option nothing declares (_module.check is on)" \
    "{ services.tacid.noSuchOption = true; }" \
    "The option \`services.tacid.noSuchOption' does not exist."
fi

step "evaluate the flake for both systems against a stand-in nixpkgs; lint and type-check the VM test's Python"
if have_upstream "evaluating the flake" && eval_checks eval-flake.nix flake.json; then
  echo "flake outputs for x86_64-linux and aarch64-linux: as expected"
  jq -r .testScript "$work/flake.json" >"$work/testScript.py"
  # As the NixOS test driver does before a VM test runs (nixos/lib/testing/driver.nix);
  # a failure there costs a VM build. pyflakes with the driver's globals as builtins;
  # mypy on the type hints, one line per node, then the script.
  if PYFLAKES_BUILTINS=machine,machines,start_all,subtest pyflakes3 "$work/testScript.py"; then
    echo "the VM test's Python: pyflakes-clean"
  else
    fail "the VM test's Python (checks/nixos/install.nix) does not pass pyflakes"
  fi
  {
    cat checks/nixos/test-driver-types.py
    echo "machine: QemuMachine;"
    cat "$work/testScript.py"
  } >"$work/testScriptWithTypes.py"
  if (cd "$work" && mypy --no-implicit-optional --pretty --no-color-output --cache-dir "$work/mypy-cache" \
    testScriptWithTypes.py) >"$work/mypy-out" 2>&1; then
    echo "the VM test's Python: mypy $(mypy --version | cut -d' ' -f2) finds no type errors"
  else
    fail "the VM test's Python (checks/nixos/install.nix) does not pass mypy: $(cat "$work/mypy-out")"
  fi
fi

step "the module beside impermanence's real module: the initrd order, the assertions"
if [ ! -f "$impermanence/nixos.nix" ]; then
  skip "evaluating beside impermanence needs its module ($impermanence/nixos.nix); set TACID_IMPERMANENCE"
elif have_upstream "evaluating beside impermanence"; then
  if nix-instantiate --eval --strict --json checks/nixos/eval-impermanence.nix "${upstream_args[@]}" \
    --arg impermanence "$(realpath "$impermanence")" >"$work/impermanence.json" 2>"$work/impermanence.err" &&
    [ ! -s "$work/impermanence.err" ] && [ "$(jq -r .checks "$work/impermanence.json")" = true ]; then
    echo "checks/nixos/eval-impermanence.nix: true (impermanence from $(realpath "$impermanence"))"
  else
    fail "checks/nixos/eval-impermanence.nix: $(cat "$work/impermanence.err")"
  fi
fi

step "Nix's own flake checker: nix flake check --no-build on a scratch copy, nixpkgs a stand-in"
# The checker of the Nix at hand (Debian's 2.8) checks every output as `nix flake check`
# does for a user: each module's form, each package, check and shell a derivation. The
# tacid flake is copied as git sees it (no target/); its nixpkgs input is overridden with a
# stand-in flake of nixpkgs' real lib and fake derivations, so nothing is fetched or built.
if have_upstream "nix flake check"; then
  scratch="$work/flake-check"
  mkdir -p "$scratch/nixpkgs" "$scratch/tacid"
  cp -r "$(realpath "$nixpkgs_lib")" "$scratch/nixpkgs/lib"
  cp checks/nixos/stand-in-nixpkgs-flake.nix "$scratch/nixpkgs/flake.nix"
  cp checks/nixos/stand-in-pkgs.nix "$scratch/nixpkgs/"
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do
      if [ -e "$f" ]; then cp --parents -- "$f" "$scratch/tacid/"; fi
    done
  if nix --extra-experimental-features 'nix-command flakes' flake check --no-build --no-write-lock-file \
    --override-input nixpkgs "path:$scratch/nixpkgs" "path:$scratch/tacid" >"$work/flake-check.out" 2>&1; then
    echo "nix flake check ($(nix --version)): the flake's outputs pass"
  else
    fail "nix flake check ($(nix --version)) on the flake: $(grep -v '^warning: not writing\|^• \|^    .path:' "$work/flake-check.out")"
  fi
fi

step "the essentials kept on /persist: the initrd's copy-in and the running system's save, on a stand-in root"
# The scripts as the module renders them with every essential on; shellcheck as
# systemd.enableStrictShellChecks would run it; then run with their root moved.
if have_upstream "the essentials' scripts" &&
  nix-instantiate --eval --strict --json "${upstream_args[@]}" -E '
    { nixpkgsLib, nixosSubset }:
    let
      nixos = import ./checks/nixos/nixos-eval.nix { inherit nixpkgsLib nixosSubset; };
      c = (nixos.eval { system = "x86_64-linux"; modules = [
        ./nixos-modules/tacid.nix
        { services.tacid.enable = true; boot.initrd.systemd.enable = true; }
      ]; }).config;
    in {
      initrd = c.boot.initrd.systemd.services.tacid-persist-essentials.script;
      save = (nixos.lib.findFirst (p: p.name == "tacid-persist-essentials") null c.environment.systemPackages).text;
    }' >"$work/essentials.json" 2>"$work/essentials.err"; then
  jq -r .initrd "$work/essentials.json" >"$work/essentials-initrd.sh"
  jq -r .save "$work/essentials.json" | sed "s|/nix/store/[a-z0-9]*-coreutils/bin/||g" >"$work/essentials-save.sh"
  if shellcheck -s bash "$work/essentials-initrd.sh" "$work/essentials-save.sh"; then
    echo "the essentials' scripts: shellcheck-clean"
  else
    fail "the essentials' scripts (nixos-modules/lib.nix) fail shellcheck, which systemd.enableStrictShellChecks runs"
  fi
  persist="$(nix-instantiate --eval --json -E '(import ./nixos-modules/lib.nix).persistDir' | jq -r .)"
  # The initrd: a fresh root, a persistent subvolume holding a kept shadow and machine id.
  sysroot="$work/sysroot"
  mkdir -p "$sysroot$persist/etc"
  echo 'root:$y$j9T$kept:19000::::::' >"$sysroot$persist/etc/shadow"
  chmod 0640 "$sysroot$persist/etc/shadow"
  echo 0123456789abcdef0123456789abcdef >"$sysroot$persist/etc/machine-id"
  sed "s|^root=/sysroot\$|root=$sysroot|" "$work/essentials-initrd.sh" >"$work/essentials-initrd-here.sh"
  if ! bash "$work/essentials-initrd-here.sh" >"$work/essentials-out" 2>&1; then
    fail "the essentials' initrd script failed: $(cat "$work/essentials-out")"
  elif [ "$(cat "$sysroot/etc/shadow" 2>/dev/null)" != 'root:$y$j9T$kept:19000::::::' ] ||
    [ "$(stat -c %a "$sysroot/etc/shadow")" != 640 ] ||
    [ "$(cat "$sysroot/etc/machine-id")" != 0123456789abcdef0123456789abcdef ] ||
    [ ! -d "$sysroot$persist/var/lib/nixos" ] || [ ! -d "$sysroot$persist/var/lib/systemd" ] ||
    [ -e "$sysroot/etc/passwd" ] || [ -s "$work/essentials-out" ]; then
    fail "the essentials' initrd script: the kept shadow and machine id must be copied into the root (mode kept), the directories made, and nothing said of a file not kept beside them (it did not exist when the running system saved): $(cat "$work/essentials-out"; ls -lR "$sysroot")"
  else
    echo "initrd: kept files copied into the new root, directories made on $persist; a file not kept beside them passed over in silence"
  fi
  # Nothing kept at all (the first boot after an install): the console says what and why.
  sysroot="$work/sysroot-empty"
  mkdir -p "$sysroot$persist"
  sed "s|^root=/sysroot\$|root=$sysroot|" "$work/essentials-initrd.sh" >"$work/essentials-initrd-here.sh"
  if ! bash "$work/essentials-initrd-here.sh" >"$work/essentials-out" 2>&1 ||
    ! grep -q "nothing is kept on $persist of .*/etc/shadow.*(the first boot after an install: see docs/nixos.md)" "$work/essentials-out"; then
    fail "the essentials' initrd script: with nothing kept it must say so, naming the files and docs/nixos.md: $(cat "$work/essentials-out")"
  else
    echo "initrd: nothing kept at all (first boot after an install): said, once, with the files"
  fi
  # The running system: a password changed, a uid map never kept (as after an install).
  host="$work/host"
  mkdir -p "$host/etc" "$host/var/lib/nixos" "$host$persist/etc"
  echo 'root:$y$j9T$new:19001::::::' >"$host/etc/shadow"
  echo '{"root":0}' >"$host/var/lib/nixos/uid-map"
  echo 'root:$y$j9T$old:19000::::::' >"$host$persist/etc/shadow"
  sed "s|^root=\$|root=$host|" "$work/essentials-save.sh" >"$work/essentials-save-here.sh"
  if ! bash "$work/essentials-save-here.sh" >"$work/essentials-out" 2>&1; then
    fail "the essentials' save script failed: $(cat "$work/essentials-out")"
  elif [ "$(cat "$host$persist/etc/shadow")" != 'root:$y$j9T$new:19001::::::' ] ||
    [ "$(cat "$host$persist/var/lib/nixos/uid-map" 2>/dev/null)" != '{"root":0}' ] ||
    [ -n "$(find "$host$persist" -name '*.tacid-new')" ] || [ -e "$host$persist/etc/passwd" ]; then
    fail "the essentials' save script: the changed shadow and the uid map must be on $persist, nothing half-written: $(ls -lR "$host$persist")"
  else
    echo 'running system: a changed /etc/shadow saved (by rename), a directory never kept seeded'
  fi
  # The initrd: a kept file that is a link (or anything not a regular file) is not copied
  # in, where /etc/shadow would become whatever it points to; the boot is told.
  sysroot="$work/sysroot-link"
  mkdir -p "$sysroot$persist/etc" "$work/elsewhere"
  echo 'root:$y$j9T$theirs:19000::::::' >"$work/elsewhere/shadow"
  ln -s "$work/elsewhere/shadow" "$sysroot$persist/etc/shadow"
  sed "s|^root=/sysroot\$|root=$sysroot|" "$work/essentials-initrd.sh" >"$work/essentials-initrd-here.sh"
  if bash "$work/essentials-initrd-here.sh" >"$work/essentials-out" 2>&1 ||
    [ -e "$sysroot/etc/shadow" ] || [ -L "$sysroot/etc/shadow" ] ||
    ! grep -q "$persist/etc/shadow is not a regular file" "$work/essentials-out"; then
    fail "the essentials' initrd script: a kept /etc/shadow that is a link must not be copied in, and the unit must say so and fail: $(cat "$work/essentials-out"; ls -l "$sysroot/etc" 2>&1)"
  else
    echo "initrd: a kept file that is a link is refused, not copied in"
  fi
  # The running system: nothing is written through a link someone put where the copy
  # goes (a temporary name of its own each time); nothing is saved into a directory
  # others can write; a live file that is a link (userborn's files kept elsewhere) is
  # not saved as one.
  host="$work/host-links"
  mkdir -p "$host/etc" "$host$persist/etc"
  echo 'root:$y$j9T$secret:19001::::::' >"$host/etc/shadow"
  chmod 0640 "$host/etc/shadow"
  echo 'nobody reads this' >"$work/victim"
  for name in tacid-new tacid-XXXXXX; do ln -s "$work/victim" "$host$persist/etc/shadow.$name"; done
  ln -s /var/lib/nixos/passwd "$host/etc/passwd"
  sed "s|^root=\$|root=$host|" "$work/essentials-save.sh" >"$work/essentials-save-here.sh"
  if ! bash "$work/essentials-save-here.sh" >"$work/essentials-out" 2>&1 ||
    [ "$(cat "$work/victim")" != 'nobody reads this' ] ||
    [ "$(cat "$host$persist/etc/shadow" 2>/dev/null)" != 'root:$y$j9T$secret:19001::::::' ] ||
    [ "$(stat -c %a "$host$persist/etc/shadow")" != 640 ] ||
    [ -e "$host$persist/etc/passwd" ] || [ -L "$host$persist/etc/passwd" ]; then
    fail "the essentials' save script: no write through a link at a temporary name, the shadow saved with its mode, a linked /etc/passwd not saved: victim '$(cat "$work/victim")', $(cat "$work/essentials-out"; ls -l "$host$persist/etc")"
  else
    echo "running system: no write through a planted link; the shadow saved (0640); a linked /etc/passwd left alone"
  fi
  rm -f "$host$persist/etc/shadow"
  chmod 0777 "$host$persist/etc"
  if bash "$work/essentials-save-here.sh" >"$work/essentials-out" 2>&1 || [ -e "$host$persist/etc/shadow" ] ||
    ! grep -q "is not root's alone" "$work/essentials-out"; then
    fail "the essentials' save script must refuse a directory others can write, and say so: $(cat "$work/essentials-out"; ls -l "$host$persist/etc")"
  else
    echo "running system: nothing saved into a directory others can write"
  fi
elif [ "${#upstream_args[@]}" -ne 0 ]; then
  fail "the essentials' scripts: $(cat "$work/essentials.err")"
fi

step "the pre-switch check, under both switch-to-configuration contracts, against a stand-in CLI"
mkdir -p "$work/bin" "$work/incoming" "$work/profiles" "$work/store/gen41" "$work/store/gen42" "$work/store/gen43"
# Stand-ins for /nix/var/nix/profiles (empty until the generations are tested) and
# /run/current-system (generation 42's toplevel).
ln -s "$work/store/gen42" "$work/running"
coreutils_prefix="$(dirname "$(dirname "$(command -v readlink)")")"
snapshot_set_size="$(jq '[.subvolumes[] | select(.snapshotted == "yes")] | length' nixos-modules/layout.json)"
printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$@" >"%s"\nexit "$(cat "%s")"\n' \
  "$work/tacid-args" "$work/tacid-exit" >"$work/bin/tacid"
chmod +x "$work/bin/tacid"
called() { [ -e "$work/tacid-args" ]; }
if have_upstream "the pre-switch check inside upstream's script" &&
  nix-instantiate --eval --strict --json checks/nixos/pre-switch-scripts.nix "${upstream_args[@]}" \
    --argstr tacid "$work/bin/tacid" --argstr coreutils "$coreutils_prefix" --argstr skipFile "$work/skip" \
    --argstr profilesDir "$work/profiles" --argstr currentSystem "$work/running" \
    >"$work/pre-switch.json" 2>"$work/pre-switch-err"; then
  jq -r .older "$work/pre-switch.json" >"$work/pre-switch-older"
  jq -r .newer "$work/pre-switch.json" >"$work/pre-switch-newer"
  # writeShellApplication fails the system's build on any shellcheck finding.
  if shellcheck "$work/pre-switch-newer"; then
    echo "the newer pre-switch script: shellcheck-clean"
  else
    fail "the pre-switch fragment (nixos-modules/lib.nix) fails shellcheck in the newer upstream script, which writeShellApplication checks"
  fi
  for contract in older newer; do
    failures_before=$failures
    # older: switch-to-configuration passes the toplevel only, and sets NIXOS_ACTION;
    # newer: the toplevel and the action, and NIXOS_ACTION too.
    run_check() {
      if [ "$contract" = older ]; then
        NIXOS_ACTION="$1" bash "$work/pre-switch-$contract" "$work/incoming"
      else
        NIXOS_ACTION="$1" bash "$work/pre-switch-$contract" "$work/incoming" "$1"
      fi >"$work/out" 2>&1
    }
    rm -f "$work/tacid-args" "$work/skip"
    echo 0 >"$work/tacid-exit"
    for action in check dry-activate; do
      run_check "$action" && ! called ||
        fail "pre-switch ($contract): '$action' must neither fail nor snapshot; said: $(cat "$work/out")"
    done
    for action in switch boot test; do
      rm -f "$work/tacid-args"
      run_check "$action" && called &&
        grep -qx -- '--pre-switch' "$work/tacid-args" &&
        [ "$(grep -c '^@' "$work/tacid-args")" = "$snapshot_set_size" ] &&
        grep -qx -- "before switching to $work/incoming" "$work/tacid-args" ||
        fail "pre-switch ($contract): '$action' must take a pre-switch snapshot set with the reason; got: $(cat "$work/out" "$work/tacid-args" 2>/dev/null)"
    done

    rm -f "$work/tacid-args"
    echo 3 >"$work/tacid-exit"
    if run_check switch; then
      fail "pre-switch ($contract): a failed snapshot must stop the switch"
    elif ! grep -q "touch $work/skip" "$work/out"; then
      fail "pre-switch ($contract): a failed snapshot must say how to switch anyway; said: $(cat "$work/out")"
    fi

    rm -f "$work/tacid-args"
    touch "$work/skip"
    run_check switch && ! called && [ ! -e "$work/skip" ] &&
      grep -q "NO snapshot" "$work/out" ||
      fail "pre-switch ($contract): the override must let one switch through, loudly, and be used up"
    if run_check switch; then
      fail "pre-switch ($contract): the override must apply to one switch only"
    fi

    rm -f "$work/tacid-args"
    mv "$work/bin/tacid" "$work/bin/tacid.away"
    run_check switch && ! called ||
      fail "pre-switch ($contract): a running system without tacid (first switch) must not stop the switch"
    mv "$work/bin/tacid.away" "$work/bin/tacid"
    [ "$failures" != "$failures_before" ] ||
      echo "pre-switch check ($contract contract): check and dry-activate skip; switch, boot, test snapshot; a failure stops the switch; the override works once; first switch: ok"
  done
  # Neither $2 nor NIXOS_ACTION: the action is unknown, so a switch may be under way.
  rm -f "$work/tacid-args"
  echo 0 >"$work/tacid-exit"
  if env -u NIXOS_ACTION bash "$work/pre-switch-older" "$work/incoming" >"$work/out" 2>&1 && called; then
    echo "pre-switch check, no action known (no \$2, no NIXOS_ACTION): takes the snapshot"
  else
    fail "pre-switch: with no action known it must take the snapshot; said: $(cat "$work/out")"
  fi

  # The generations, from links in the profiles directory as nix-env makes them; the
  # running system is generation 42. Under each contract and each order of the profile
  # and the switch, the reason names them, and a refused switch says what is true now.
  profiles="$work/profiles"
  generations() { # the profile's generation, then the generation links that exist
    rm -f "$profiles"/system*
    ln -s "system-$1-link" "$profiles/system"
    shift
    for n in "$@"; do ln -s "$work/store/gen$n" "$profiles/system-$n-link"; done
  }
  # Links that are not generations: not numbers, too long, a leading 0; all to gen43.
  hostile_links() {
    for name in system-4x-link system-0043-link system-1234567890123456789-link system--link system-43-link.tmp; do
      ln -s "$work/store/gen43" "$profiles/$name"
    done
  }
  # $1 contract, $2 incoming, $3 reason expected, then what a refusal must say, then
  # (after --not) what it must not.
  switch_case() {
    local contract=$1 incoming=$2 reason=$3 what
    shift 3
    rm -f "$work/tacid-args"
    echo 0 >"$work/tacid-exit"
    if ! NIXOS_ACTION=switch bash "$work/pre-switch-$contract" "$incoming" switch >"$work/out" 2>&1 ||
      ! grep -qxF -- "$reason" "$work/tacid-args"; then
      fail "pre-switch ($contract): the reason must be \"$reason\"; got: $(cat "$work/out" "$work/tacid-args" 2>/dev/null)"
      return
    fi
    echo 3 >"$work/tacid-exit"
    if NIXOS_ACTION=switch bash "$work/pre-switch-$contract" "$incoming" switch >"$work/out" 2>&1; then
      fail "pre-switch ($contract): a failed snapshot must stop the switch"
      return
    fi
    local must=true
    for what in "$@"; do
      if [ "$what" = --not ]; then
        must=false
      elif [ "$must" = true ] && ! grep -qF -- "$what" "$work/out"; then
        fail "pre-switch ($contract, \"$reason\"): the refusal must say \"$what\"; said: $(cat "$work/out")"
      elif [ "$must" = false ] && grep -qF -- "$what" "$work/out"; then
        fail "pre-switch ($contract, \"$reason\"): the refusal must not say \"$what\"; said: $(cat "$work/out")"
      fi
    done
  }
  for contract in older newer; do
    failures_before=$failures
    # nixos-rebuild switch: it has pointed the profile at the new generation first.
    generations 43 41 42 43
    switch_case "$contract" "$work/store/gen43" "before switching from generation 42 to 43" \
      "the running system (generation 42) and what the next boot starts are as they were" \
      "already points at the configuration not switched to (generation 43)" \
      "nix-env -p $profiles/system --switch-generation 42" \
      --not "nothing was changed"
    # The same with links that are no generation's beside them.
    hostile_links
    switch_case "$contract" "$work/store/gen43" "before switching from generation 42 to 43"
    # switch-to-configuration run directly on a build nothing links to: the profile is
    # the running generation's still.
    generations 42 41 42
    switch_case "$contract" "$work/store/gen43" "before switching from generation 42 to $work/store/gen43" \
      "still points at the running system: nothing was changed" \
      --not "--switch-generation" --not "already points"
    hostile_links
    switch_case "$contract" "$work/store/gen43" "before switching from generation 42 to $work/store/gen43"
    # A toplevel the keeper would refuse to show is left out, not passed on.
    for odd in "gen 43" "gen;43" 'gen$(x)43' "gen\\43"; do
      mkdir -p "$work/store/$odd"
      switch_case "$contract" "$work/store/$odd" "before switching from generation 42"
    done
    # nixos-rebuild switch --rollback: the profile is set back to 41 first.
    generations 41 41 42 43
    switch_case "$contract" "$work/store/gen41" "before switching from generation 42 to 41" \
      "already points at the configuration not switched to (generation 41)" \
      "nix-env -p $profiles/system --switch-generation 42"
    # A running system no link names (a specialisation): the profile left as it is.
    generations 43 43
    switch_case "$contract" "$work/store/gen41" "before switching to $work/store/gen41" \
      "points at generation 43, neither the running system nor the configuration not switched to" \
      --not "--switch-generation"
    # No system profile at all (a machine that never ran nixos-rebuild).
    rm -f "$profiles"/system*
    switch_case "$contract" "$work/store/gen43" "before switching to $work/store/gen43" \
      "There is no system profile at $profiles/system: nothing was changed" \
      --not "--switch-generation"
    [ "$failures" != "$failures_before" ] ||
      echo "pre-switch check ($contract contract): the reason names the generations left and switched to, under nixos-rebuild's order and a direct switch-to-configuration; links that are not generations and toplevels that are not store paths are left out; a refusal says what the profile points at and how to set it back"
  done
elif [ "${#upstream_args[@]}" -ne 0 ]; then
  fail "checks/nixos/pre-switch-scripts.nix: $(cat "$work/pre-switch-err")"
fi

step "the package's install steps (shipped.json) against the repository"
install_commands="$(nix-instantiate --eval --strict --json -E '(import ./nixos-modules/lib.nix).installCommands' |
  jq -r .)"
rewrite_commands="$(nix-instantiate --eval --strict --json -E '
  let l = import ./nixos-modules/lib.nix; in
  l.rewriteUnitPaths (builtins.mapAttrs (tool: _: "/TOOLS/${tool}") l.shipped.unit_paths.tools)' |
  jq -r .)"
if out="$work/package" bash -euo pipefail -c "$install_commands" 2>"$work/install-err"; then
  echo "installs $(find "$work/package" -type f | wc -l) files"
  if ! out="$work/package" bash -euo pipefail -c "$rewrite_commands" 2>"$work/install-err"; then
    fail "the package's unit rewrite fails: $(cat "$work/install-err")"
  elif grep -n '/usr/bin/' "$work/package/lib/systemd/system/"*.service; then
    fail "a unit in the package still names /usr/bin (shipped.json unit_paths.tools lacks a tool?)"
  elif grep -h '^ExecStart=' "$work/package/lib/systemd/system/"*.service | grep -v "^ExecStart=$work/package/bin/"; then
    fail "a daemon's ExecStart does not run the package's own binary"
  else
    echo "the package's units run its own binaries and tools by store path"
  fi
else
  fail "the package would not build: $(cat "$work/install-err")"
fi

step "the module's tmpfiles rules, applied by systemd-tmpfiles to a stand-in root"
if ! command -v systemd-tmpfiles >/dev/null; then
  skip "systemd-tmpfiles is not installed"
else
  keeper_user="$(jq -r .keeper_user nixos-modules/layout.json)"
  keeper_dir="$(jq -r '.snapshots_mount_point + "/" + .keeper_dir' nixos-modules/layout.json)"
  store="$(jq -r .snapshots_mount_point nixos-modules/layout.json)"
  root="$work/tmpfiles-root"
  mkdir -p "$root/etc" "$root$keeper_dir"
  echo "root:x:0:0::/root:/bin/sh" >"$root/etc/passwd"
  echo "$keeper_user:x:4321:4321::/:/bin/false" >>"$root/etc/passwd"
  printf 'root:x:0:
%s:x:4321:
' "$keeper_user" >"$root/etc/group"
  # A journal left by an earlier uid of the keeper.
  echo journal >"$root$keeper_dir/journal"
  chmod 0600 "$root$keeper_dir/journal"
  chown -R 1234:1234 "$root$keeper_dir"
  chmod 0755 "$root$store"
  nix-instantiate --eval --strict --json -E '(import ./nixos-modules/lib.nix).tmpfilesRules' |
    jq -r '.[]' >"$work/tacid.conf"
  if ! systemd-tmpfiles --create --root="$root" "$work/tacid.conf" 2>"$work/tmpfiles-err" ||
    [ -s "$work/tmpfiles-err" ]; then
    fail "systemd-tmpfiles on the module's rules: $(cat "$work/tmpfiles-err")"
  elif [ "$(stat -c '%a %u' "$root$store")" != "700 0" ] ||
    [ "$(stat -c '%a %u %g' "$root$keeper_dir")" != "700 4321 4321" ] ||
    [ "$(stat -c '%a %u' "$root$keeper_dir/journal")" != "600 4321" ]; then
    fail "tmpfiles: store $(stat -c '%a %u' "$root$store"), keeper dir $(stat -c '%a %u %g' "$root$keeper_dir"), journal $(stat -c '%a %u' "$root$keeper_dir/journal")"
  else
    echo "tmpfiles: the store is root's (0700); the keeper's directory and journal are the keeper's"
  fi
fi

step "the module's drop-ins keep the shipped ExecStart but one value"
for case in "keeper_unit --approver-group admins" "stem_unit --device /dev/vdb" \
  "keeper_unit --copies-config /nix/store/00000000000000000000000000000000-tacid-copies.json" \
  "stem_unit --copies-config /nix/store/00000000000000000000000000000000-tacid-copies.json" \
  "copier_unit --copies-config /nix/store/00000000000000000000000000000000-tacid-copies.json" \
  "notify_user_unit --group admins" "keeper_unit --timeline false"; do
  read -r key flag value <<<"$case"
  unit="$(jq -r ".$key" nixos-modules/layout.json)"
  source="$(jq -r ".files[] | select(.layout_key == \"$key\") | .source_dir" nixos-modules/shipped.json)/$unit"
  if [ ! -f "$source" ]; then
    fail "$source is missing"
    continue
  fi
  nix-instantiate --eval --strict --json -E "
    (import ./nixos-modules/lib.nix).execStartDropIn { unit = \"$source\"; flag = \"$flag\"; value = \"$value\"; }" |
    jq -r . >"$work/drop-in.sh"
  if ! bash -euo pipefail "$work/drop-in.sh" >"$work/drop-in" 2>&1; then
    fail "drop-in for $unit: $(cat "$work/drop-in")"
  else
    expected="$(grep '^ExecStart=' "$source" | sed -E "s| $flag [^ ]+| $flag $value|")"
    if [ "$(sed -n 2p "$work/drop-in")" != "ExecStart=" ] || [ "$(sed -n 3p "$work/drop-in")" != "$expected" ] ||
      ! grep -q -- " $flag $value" "$work/drop-in"; then
      fail "drop-in for $unit is wrong: $(cat "$work/drop-in")"
    else
      echo "drop-in for $unit: $(sed -n 3p "$work/drop-in")"
    fi
  fi
done

step "the keeper's drop-in sets the retention policy, and the stem's the hard floor"
for case in "keeper_unit --keep-hourly 48 --free-floor-bytes 1073741824" "stem_unit --hard-floor-bytes 0 --device /dev/vdb"; do
  read -r key flag1 value1 flag2 value2 <<<"$case"
  unit="$(jq -r ".$key" nixos-modules/layout.json)"
  source="$(jq -r ".files[] | select(.layout_key == \"$key\") | .source_dir" nixos-modules/shipped.json)/$unit"
  nix-instantiate --eval --strict --json -E "
    (import ./nixos-modules/lib.nix).execStartDropInAll { unit = \"$source\"; values = [
      { flag = \"$flag1\"; value = \"$value1\"; } { flag = \"$flag2\"; value = \"$value2\"; } ]; }" |
    jq -r . >"$work/drop-in.sh"
  if ! bash -euo pipefail "$work/drop-in.sh" >"$work/drop-in" 2>&1; then
    fail "drop-in for $unit: $(cat "$work/drop-in")"
  else
    expected="$(grep '^ExecStart=' "$source" | sed -E -e "s| $flag1 [^ ]+| $flag1 $value1|" -e "s| $flag2 [^ ]+| $flag2 $value2|")"
    if [ "$(sed -n 3p "$work/drop-in")" != "$expected" ] || ! grep -q -- " $flag1 $value1" "$work/drop-in" ||
      ! grep -q -- " $flag2 $value2" "$work/drop-in"; then
      fail "drop-in for $unit is wrong: $(cat "$work/drop-in")"
    else
      echo "drop-in for $unit: $(sed -n 3p "$work/drop-in")"
    fi
  fi
done

step "the timeline timer, timeline on and off: a snapshot then a prune, or only a prune"
# The module enables the timer either way; with services.tacid.retention.timeline = false
# its drop-in (lib.nix pruneOnlyDropIn) makes the service prune only, so the free-space
# floor is still checked on a timer. The prune is ExecStopPost, so it runs after a failed
# snapshot too.
timeline_service="$(jq -r .timeline_unit nixos-modules/layout.json)"
timeline_timer="$(jq -r .timeline_timer nixos-modules/layout.json)"
source_of() {
  echo "$(jq -r ".files[] | select(.layout_key == \"$1\") | .source_dir" nixos-modules/shipped.json)/$(jq -r ".$1" nixos-modules/layout.json)"
}
bindir="$(jq -r .unit_paths.binaries_dir nixos-modules/shipped.json)"
cli="$(jq -r .binaries.cli.name nixos-modules/shipped.json)"
units="$work/timeline"
mkdir -p "$units/bin"
# systemd-analyze verify checks that each program exists: a stand-in for the CLI.
printf '#!/bin/sh\nexit 0\n' >"$units/bin/$cli"
chmod +x "$units/bin/$cli"
sed "s|$bindir/|$units/bin/|g" "$(source_of timeline_unit)" >"$units/$timeline_service"
cp "$(source_of timeline_timer)" "$units/$timeline_timer"
verify_timeline() {
  (cd "$units" && systemd-analyze verify --man=no "$units/$timeline_timer" "$units/$timeline_service") \
    >"$work/verify-out" 2>&1 && [ ! -s "$work/verify-out" ]
}
if [ "$(grep -c '^ExecStart=' "$units/$timeline_service")" != 1 ] ||
  ! grep -qx "ExecStart=$units/bin/$cli data snapshot --timeline" "$units/$timeline_service" ||
  ! grep -qx "ExecStopPost=$units/bin/$cli data prune" "$units/$timeline_service" ||
  grep -q '^ExecStartPost=' "$units/$timeline_service"; then
  fail "$timeline_service must take the timeline set (ExecStart) and prune even when that failed (ExecStopPost): $(grep '^Exec' "$units/$timeline_service")"
fi
grep -qx 'WantedBy=timers.target' "$units/$timeline_timer" || fail "$timeline_timer must be wanted by timers.target"
nix-instantiate --eval --strict --json -E "
  (import ./nixos-modules/lib.nix).pruneOnlyDropIn { unit = \"$units/$timeline_service\"; }" |
  jq -r . >"$work/prune-only.sh"
mkdir -p "$units/$timeline_service.d"
module_drop_in="$(nix-instantiate --eval --json -E '(import ./nixos-modules/lib.nix).moduleDropIn' | jq -r .)"
drop_in="$units/$timeline_service.d/$module_drop_in"
prune_only=false
if ! bash -euo pipefail "$work/prune-only.sh" >"$work/prune-only.conf" 2>"$work/prune-only-err"; then
  fail "the prune-only drop-in for $timeline_service: $(cat "$work/prune-only-err")"
elif [ "$(grep '^Exec' "$work/prune-only.conf" | tr '\n' ' ')" != "ExecStart= ExecStart=$units/bin/$cli data prune ExecStopPost= " ]; then
  fail "the prune-only drop-in for $timeline_service is wrong: $(cat "$work/prune-only.conf")"
else
  prune_only=true
fi
if [ "$prune_only" != true ]; then
  : # reported above; nothing to verify
elif ! command -v systemd-analyze >/dev/null; then
  skip "systemd-analyze is not installed; the timeline units were not verified"
elif ! verify_timeline; then
  fail "systemd-analyze verify $timeline_timer $timeline_service (timeline on): $(cat "$work/verify-out")"
else
  cp "$work/prune-only.conf" "$drop_in"
  if ! verify_timeline; then
    fail "systemd-analyze verify $timeline_timer $timeline_service (timeline off, with the drop-in): $(cat "$work/verify-out")"
  else
    # The control: verify does read the drop-in directory (a key it does not know is reported).
    echo 'NoSuchKey=1' >>"$drop_in"
    if verify_timeline; then
      fail "systemd-analyze verify did not read $timeline_service.d/, so the prune-only drop-in was not checked"
    else
      echo "timeline on: $(grep '^Exec' "$units/$timeline_service" | tr '\n' ' ')"
      echo "timeline off (the drop-in): the service runs $(grep '^ExecStart=.' "$work/prune-only.conf") only"
      echo "systemd-analyze verify: clean, timeline on and off"
    fi
  fi
fi

step "scripts/make-disk-layout.sh on a loop device"
if [ "$(id -u)" != 0 ] || ! command -v losetup >/dev/null || ! command -v mkfs.btrfs >/dev/null; then
  skip "make-disk-layout needs root, losetup and mkfs.btrfs"
else
  truncate -s 300M "$work/disk.img"
  if ! loop_dev="$(losetup -f --show "$work/disk.img" 2>/dev/null)"; then
    loop_dev=""
    skip "no loop device available"
  else
    mkdir "$work/top"
    if ! scripts/make-disk-layout.sh "$loop_dev" >"$work/mdl-out" 2>&1; then
      fail "make-disk-layout on an empty device: $(cat "$work/mdl-out")"
    else
      label="$(jq -r .filesystem_label nixos-modules/layout.json)"
      [ "$(blkid -o value -s LABEL "$loop_dev")" = "$label" ] || fail "make-disk-layout: label is not $label"
      mount -o subvolid=5 "$loop_dev" "$work/top"
      expected="$(jq -r '.subvolumes[].name' nixos-modules/layout.json | sort)"
      actual="$(btrfs subvolume list -o "$work/top" | awk '{print $NF}' | sort)"
      [ "$expected" = "$actual" ] || fail "make-disk-layout: subvolumes are [$actual], layout says [$expected]"
      blank="$(jq -r .root_blank_subvolume nixos-modules/layout.json)"
      [ "$(btrfs property get -ts "$work/top/$blank" ro)" = "ro=true" ] || fail "make-disk-layout: $blank is not read-only"
      snapshots="$(jq -r .snapshots_subvolume nixos-modules/layout.json)"
      [ "$(stat -c %a "$work/top/$snapshots")" = 700 ] || fail "make-disk-layout: $snapshots is not 0700"
      touch "$work/top/$(jq -r '.subvolumes[] | select(.restorable) | .name' nixos-modules/layout.json | head -1)/precious"
      umount "$work/top"
      if scripts/make-disk-layout.sh "$loop_dev" >"$work/mdl-out" 2>&1; then
        fail "make-disk-layout must refuse a device that holds a filesystem"
      elif ! grep -q -- "--force" "$work/mdl-out"; then
        fail "make-disk-layout's refusal must say how to proceed: $(cat "$work/mdl-out")"
      fi
      # Without jq, through python3.
      if ! command -v python3 >/dev/null; then
        skip "make-disk-layout without jq needs python3"
      else
        mkdir "$work/nojq"
        for t in bash mkfs.btrfs btrfs blkid mount umount mountpoint mktemp readlink grep sync sed rmdir mkdir chmod dirname cat; do
          ln -s "$(command -v "$t")" "$work/nojq/$t"
        done
        # The real interpreter, not a version manager's shim.
        ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$work/nojq/python3"
        if ! PATH="$work/nojq" scripts/make-disk-layout.sh --force "$loop_dev" >"$work/mdl-out" 2>&1; then
          fail "make-disk-layout --force (python3, no jq): $(cat "$work/mdl-out")"
        else
          mount -o subvolid=5 "$loop_dev" "$work/top"
          actual="$(btrfs subvolume list -o "$work/top" | awk '{print $NF}' | sort)"
          [ "$expected" = "$actual" ] || fail "make-disk-layout --force: subvolumes are [$actual]"
          [ -z "$(find "$work/top" -name precious)" ] || fail "make-disk-layout --force kept old data"
          umount "$work/top"
        fi
      fi
      echo "make-disk-layout: layout made, refusal without --force, --force without jq: checked"
    fi
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "nix-checks: $failures failure(s)" >&2
  exit 1
fi
echo "nix-checks: all passed (not run here: nix flake check against the real nixpkgs, the package build, the NixOS VM test)"
