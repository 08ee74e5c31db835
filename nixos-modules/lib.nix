# What the tacid module derives from the layout, written with builtins only, so that
# checks/nix-checks.sh can evaluate all of it on a machine without nixpkgs.
#
# Every name comes from layout.json (rendered by the layout crate; a Rust test fails when
# the committed copy drifts) or shipped.json (what the package installs; the same test
# checks that each file and binary exists in the repository). Nothing here retypes a
# subvolume, a path, a bus name or a unit name.
let
  inherit (builtins)
    concatLists
    concatStringsSep
    elem
    filter
    head
    listToAttrs
    map
    stringLength
    substring
    ;

  layout = builtins.fromJSON (builtins.readFile ./layout.json);
  shipped = builtins.fromJSON (builtins.readFile ./shipped.json);

  hasSuffix =
    suffix: s:
    let
      n = stringLength s;
      m = stringLength suffix;
    in
    n >= m && substring (n - m) m s == suffix;

  mapAttrsToList = f: attrs: map (name: f name attrs.${name}) (builtins.attrNames attrs);

  hasPrefix = prefix: s: substring 0 (stringLength prefix) s == prefix;

  unique = list: builtins.foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ] list;

  # `tacid-stem.service` -> `tacid-stem`, its attribute name under systemd.services.
  timerAttrName =
    unit:
    if hasSuffix ".timer" unit then
      substring 0 (stringLength unit - stringLength ".timer") unit
    else
      throw "tacid: ${unit} is not a .timer unit; layout.json and the module disagree";

  serviceAttrName =
    unit:
    if hasSuffix ".service" unit then
      substring 0 (stringLength unit - stringLength ".service") unit
    else
      throw "tacid: ${unit} is not a .service unit; layout.json and the module disagree";

  names = list: map (s: s.name) list;

  mounted = filter (s: s.mount_point != null) layout.subvolumes;
  snapshotByDefault = names (filter (s: s.snapshotted == "yes") layout.subvolumes);
  snapshottable = names (filter (s: elem s.snapshotted [ "yes" "optional" ]) layout.subvolumes);
  restorableMounted = filter (s: s.restorable) mounted;

  # A shipped file's name, its place in the repository and its place in the package.
  fileName = entry: layout.${entry.layout_key} + entry.suffix;
  sourcePath = entry: "${entry.source_dir}/${fileName entry}";
  installedPath = entry: "${entry.install_dir}/${fileName entry}";

  initrdUnits = [
    layout.initrd_restore_unit
    layout.initrd_wipe_root_unit
  ];
  initrdUnitEntries = filter (e: elem (fileName e) initrdUnits) shipped.files;
  initrdUnitDirs = unique (map (e: e.install_dir) initrdUnitEntries);
  initrdUnitsDir =
    if builtins.length initrdUnitDirs == 1 then
      builtins.head initrdUnitDirs
    else
      throw "tacid: shipped.json must install both initrd units into one directory, not ${toString initrdUnitDirs}";

  # Units the module enables, and by which target; the Rust name test checks that each
  # unit file's own [Install] section says the same.
  enabledUnits = filter (e: e ? wanted_by) shipped.files;
  enabledInitrdUnits = filter (e: elem (fileName e) initrdUnits) enabledUnits;
  enabledSystemUnits = filter (e: !(elem (fileName e) initrdUnits)) enabledUnits;
  wantedByFor =
    entries:
    listToAttrs (
      map
        (e: {
          name = serviceAttrName (fileName e);
          value.wantedBy = [ e.wanted_by ];
        })
        entries
    );

  # Every mount of the layout. Everything the running system's state lives on is mounted
  # in the initrd (neededForBoot), so activation and bind mounts from /persist find it;
  # the snapshot store is not needed for boot (the initrd reaches it from the top of the
  # filesystem) and is mounted in stage 2.
  fileSystemsFor =
    device:
    listToAttrs (
      map
        (s: {
          name = s.mount_point;
          value = {
            inherit device;
            fsType = "btrfs";
            options = [ "subvol=${s.name}" ];
            neededForBoot = s.name != layout.snapshots_subvolume;
          };
        })
        mounted
    );

  # What NixOS itself needs from one boot to the next, kept on the persistent subvolume
  # when the root is made again at every boot (adr/0022). Each is one option of
  # services.tacid.persistEssentials. Directories are bind mounts from there, mounted in
  # the initrd (neededForBoot) so activation finds them; files are copied in by the initrd
  # before activation and copied back whenever they change, since activation and passwd
  # replace /etc/shadow and its kin by rename, which a bind mount refuses and a symlink
  # does not survive.
  persistDir = dirOf layout.snapshots_mount_point;
  persistedPath = path: "${persistDir}${path}";
  essentialDirs = {
    # The uid and gid map: without it, ids may move under files on /persist and /home.
    nixosIds = [ "/var/lib/nixos" ];
    # Timer stamps (Persistent=), the random seed, backlight and rfkill state.
    systemdState = [ "/var/lib/systemd" ];
  };
  essentialFiles = sshHostKeys: {
    machineId = [ "/etc/machine-id" ];
    inherit sshHostKeys;
    users = [ "/etc/passwd" "/etc/group" "/etc/shadow" "/etc/gshadow" ];
  };
  # The mount unit systemd names for `path` under the initrd's /sysroot.
  sysrootMountUnit = escape: path: "${escape "/sysroot${path}"}.mount";

  # The initrd's half: make the persisted directories, copy the persisted files into the
  # new root (only those that exist). The running system saves every one that exists at
  # every boot, so one missing beside others kept did not exist there (/etc/gshadow, which
  # NixOS does not make; host keys without sshd): only when none is kept, as at the first
  # boot after an install, is it worth a word. A kept file must be a
  # regular file: a link there would be copied in as a link, and /etc/shadow become
  # whatever it points to.
  persistEssentialsInitrdScript =
    { dirs, files }:
    ''
      set -u
      # The new root (checks/nix-checks.sh runs this against another).
      root=/sysroot
      status=0
      found=0
      missing=
      for dir in ${concatStringsSep " " (map (d: shellQuote (persistedPath d)) dirs)}; do
        if ! mkdir -p "$root$dir"; then status=1; fi
      done
      for file in ${concatStringsSep " " (map shellQuote files)}; do
        kept="$root${persistDir}$file"
        if [ -L "$kept" ] || { [ -e "$kept" ] && [ ! -f "$kept" ]; }; then
          echo "tacid: ${persistDir}$file is not a regular file, so it is not copied in and this boot starts without a kept $file; remove it (the running system saves $file there again)"
          found=1
          status=1
        elif [ ! -e "$kept" ]; then
          missing="$missing $file"
        else
          found=1
          if ! { mkdir -p "$(dirname "$root$file")" && cp -a "$kept" "$root$file"; }; then status=1; fi
        fi
      done
      if [ "$found" = 0 ] && [ -n "$missing" ]; then
        echo "tacid: nothing is kept on ${persistDir} of$missing, so this boot starts without them (the first boot after an install: see docs/nixos.md)"
      fi
      exit "$status"
    '';

  # The running system's half: the files back onto the persistent subvolume, and a
  # directory whose persisted copy does not exist yet seeded from the root (at install
  # time, run inside the new system with nixos-enter). Each file is copied to a new
  # temporary name, synced, renamed over the kept copy and the rename synced, so a power
  # cut leaves the old copy or the new one, whole. Only into directories root alone can
  # write, so nobody else can put a link where the copy goes; a file that is itself a
  # link (userborn's files kept elsewhere) is not what this keeps, and is left alone.
  persistEssentialsSaveScript =
    { coreutils, dirs, files }:
    ''
      set -u
      # The running system's root (checks/nix-checks.sh runs this against another).
      root=
      status=0
      # Root's own, and writable by nobody else: the directory and each one above it.
      rootsOnly() {
        local at=$1
        while :; do
          if [ -L "$at" ] || [ "$(${coreutils}/bin/stat -c %u "$at")" != 0 ] ||
            [ $(($(${coreutils}/bin/stat -c 0%a "$at") & 022)) != 0 ]; then
            echo "tacid: $at is not root's alone (a link, another owner, or writable by others), so nothing is saved there; make it root's, mode 0755" >&2
            return 1
          fi
          if [ "$at" = "$root${persistDir}" ] || [ "$at" = / ]; then return 0; fi
          at=$(${coreutils}/bin/dirname "$at")
        done
      }
      for dir in ${concatStringsSep " " (map shellQuote dirs)}; do
        kept="$root${persistDir}$dir"
        dir="$root$dir"
        if [ -e "$kept" ] || [ ! -d "$dir" ]; then continue; fi
        if ! { ${coreutils}/bin/mkdir -p "$(${coreutils}/bin/dirname "$kept")" &&
          rootsOnly "$(${coreutils}/bin/dirname "$kept")" && ${coreutils}/bin/cp -a "$dir" "$kept"; }; then
          status=1
        fi
      done
      for file in ${concatStringsSep " " (map shellQuote files)}; do
        kept="$root${persistDir}$file"
        keptIn=$(${coreutils}/bin/dirname "$kept")
        file="$root$file"
        if [ ! -e "$file" ] || [ -L "$file" ]; then continue; fi
        if ! { ${coreutils}/bin/mkdir -p "$keptIn" && rootsOnly "$keptIn"; }; then
          status=1
          continue
        fi
        if ! new=$(${coreutils}/bin/mktemp "$kept.tacid-XXXXXX"); then
          status=1
          continue
        fi
        if ! { ${coreutils}/bin/cp -a "$file" "$new" && ${coreutils}/bin/sync "$new" &&
          ${coreutils}/bin/mv -f "$new" "$kept" && ${coreutils}/bin/sync "$keptIn"; }; then
          ${coreutils}/bin/rm -f "$new"
          status=1
        fi
      done
      exit "$status"
    '';

  # Can this hash log in (nixos/modules/config/users-groups.nix's allowsLogin)?
  allowsLogin = hash: hash == "" || !(elem hash [ null "!" "!!" "*" ]);
  # Root or a wheel user, not disabled, with a way in that the configuration itself declares.
  declaredWayIn =
    users:
    builtins.any
      (
        name:
        let
          u = users.${name};
        in
        (u.enable or true)
        && (name == "root" || u.group == "wheel" || elem "wheel" u.extraGroups)
        && (
          allowsLogin u.hashedPassword
          || u.password != null
          || u.hashedPasswordFile != null
          || u.initialPassword != null
          || allowsLogin u.initialHashedPassword
          || (u.openssh.authorizedKeys.keys or [ ]) != [ ]
          || (u.openssh.authorizedKeys.keyFiles or [ ]) != [ ]
        )
      )
      (builtins.attrNames users);

  # The mount point of `fileSystems` that holds `path` (the longest that is a prefix).
  mountHolding =
    fileSystems: path:
    builtins.foldl'
      (best: m: if (m == "/" || path == m || hasPrefix "${m}/" path) && stringLength m > stringLength best then m else best)
      ""
      (map (fs: fs.mountPoint or "") (builtins.attrValues fileSystems));

  # environment.persistence (the impermanence module) beside tacid: what it may not do.
  persistenceAssertions =
    { persistence, fileSystems, ephemeralRoot, keptByTacid }:
    concatLists (
      mapAttrsToList
        (
          store: p:
          let
            opt = "environment.persistence.\"${store}\"";
            dirs = map (d: d.dirPath) (p.directories ++ concatLists (mapAttrsToList (_: u: u.directories) (p.users or { })));
            files = map (f: f.filePath) (p.files ++ concatLists (mapAttrsToList (_: u: u.files) (p.users or { })));
            onLayout = d: filter (s: s.mount_point != "/" && (d == s.mount_point || hasPrefix "${d}/" s.mount_point)) mounted;
            holder = mountHolding fileSystems p.persistentStoragePath;
            inSnapshots = p.persistentStoragePath == layout.snapshots_mount_point || hasPrefix "${layout.snapshots_mount_point}/" p.persistentStoragePath;
            # The same path, or one of tacid's inside a directory impermanence binds (its
            # "/etc/ssh" holds the host keys tacid copies: each save, renamed through that
            # bind over the very file watched, would start the next).
            keptAlso = x: filter (kept: x.path == kept || hasPrefix "${kept}/" x.path) (dirs ++ files);
            both = filter (x: keptAlso x != [ ]) keptByTacid;
          in
          map
            (d: {
              assertion = onLayout d == [ ];
              message = "services.tacid: ${opt}.directories has \"${d}\", but tacid keeps ${concatStringsSep " and " (map (s: "${s.mount_point} (${s.name})") (onLayout d))} in its own subvolume: kept across boots, snapshotted, restorable by itself. A bind mount from ${p.persistentStoragePath} would hide it. Remove \"${d}\" from ${opt}.directories.";
            })
            dirs
          ++ [
            {
              assertion = !ephemeralRoot || (holder != "/" && holder != "");
              message = "services.tacid: ${opt} keeps its files in ${p.persistentStoragePath}, which is no filesystem of its own but a directory on the root, and tacid makes the root again at every boot: everything \"persisted\" there would be gone at the next boot. Use environment.persistence.\"${persistDir}\" (tacid's persistent subvolume), or declare fileSystems.\"${p.persistentStoragePath}\" for a filesystem of its own.";
            }
            {
              assertion = !inSnapshots;
              message = "services.tacid: ${opt} keeps its files in ${p.persistentStoragePath}, inside tacid's snapshot store (${layout.snapshots_mount_point}), which only tacid writes. Use environment.persistence.\"${persistDir}\".";
            }
          ]
          ++ map
            (x: {
              assertion = false;
              message = "services.tacid: ${x.path} is kept on ${persistDir} both by services.tacid.persistEssentials.${x.option} and by ${opt} (as \"${head (keptAlso x)}\"); the two would mount or copy over each other. Set services.tacid.persistEssentials.${x.option} = false; or remove \"${head (keptAlso x)}\" from ${opt}.";
            })
            both
        )
        persistence
    );

  # The snapshot store stays root-only (it holds old copies of everybody's files); the
  # keeper's journal lives in its own directory there, bound into the keeper's state
  # directory by the keeper's unit, so no restore replaces it.
  # `Z` gives the keeper back its journal when its uid changed: an ephemeral root forgets
  # NixOS's uid map (/var/lib/nixos) unless it is kept on /persist.
  tmpfilesRules = [
    "d ${layout.snapshots_mount_point} 0700 root root -"
    "d ${layout.snapshots_mount_point}/${layout.keeper_dir} 0700 ${layout.keeper_user} ${layout.keeper_user} -"
    "Z ${layout.snapshots_mount_point}/${layout.keeper_dir} - ${layout.keeper_user} ${layout.keeper_user} -"
  ];

  # The copier's state (the sealing key, the generations it wrote) on @snapshots beside the
  # keeper's, for machines with sealed targets; its unit binds it onto its state directory.
  copierTmpfilesRules = [
    "d ${layout.snapshots_mount_point}/${layout.copier_dir} 0700 ${layout.copier_user} ${layout.copier_user} -"
    "Z ${layout.snapshots_mount_point}/${layout.copier_dir} - ${layout.copier_user} ${layout.copier_user} -"
  ];

  # The initrd finds the filesystem by the default device unless told otherwise.
  kernelParamsFor =
    device: if device == layout.default_device then [ ] else [ "${layout.kernel_device_key}=${device}" ];

  # The initrd keeps what a restore replaces unless the disk is below the hard floor
  # (adr/0027): the stem's floor, told to the initrd when it is not the default.
  hardFloorParamsFor =
    bytes: if bytes == layout.defaults.hard_floor_bytes then [ ] else [ "${layout.kernel_hard_floor_key}=${toString bytes}" ];

  fsProblem =
    device: fileSystems: s:
    let
      fs = fileSystems.${s.mount_point} or null;
      # As a set: `subvol=/@x` is `subvol=@x`, and the same option given twice (the
      # module's and a user's own, merged) is one; other options (compress=zstd, noatime)
      # are the user's to add.
      normalise = o: if hasPrefix "subvol=/" o then "subvol=${substring 8 (stringLength o) o}" else o;
      subvolOptions = unique (map normalise (filter (hasPrefix "subvol=") (fs.options or [ ])));
      bind = elem "bind" (fs.options or [ ]);
    in
    if fs == null then
      "it is not declared"
    else if bind then
      {
        what = "it is a bind mount of ${toString (fs.device or "")}";
        fix = "Older releases of impermanence make such a mount for a directory in environment.persistence.<path>.directories; tacid keeps ${s.mount_point} in its own subvolume ${s.name} (kept across boots, snapshotted, restorable), so remove \"${s.mount_point}\" from environment.persistence, or the bind mount from your configuration.";
      }
    else if (fs.fsType or null) != "btrfs" then
      "its fsType is \"${toString (fs.fsType or "")}\", not \"btrfs\""
    else if (fs.device or null) != device then
      "its device is \"${toString (fs.device or "")}\", not services.tacid.device (\"${device}\")"
    else if subvolOptions != [ "subvol=${s.name}" ] then
      "its subvolume options are [ ${concatStringsSep " " subvolOptions} ], not [ subvol=${s.name} ]"
    else
      null;

  # Each message names the option, the problem and the fix.
  # Copies off the disk (adr/0018). A target's timer and service are named after it.
  copyUnitName = target: "${layout.copy_unit_prefix}${target}";
  verifyUnitName = target: "${layout.verify_unit_prefix}${target}";
  # A sealed target (adr/0024): asked for, or an object store, which holds nothing else.
  isSealedTarget = t: t.seal.enable || hasPrefix "s3://" t.target;
  # The stem's drop-ins for copies, installed by the package here (not under the unit's
  # .d directory, where systemd would apply them on every machine); the module links them
  # in only when copies are configured (and the network one only for an SSH target).
  stemCopyDropInsDir = "share/tacid/stem-drop-ins";
  stemCopyDropIn = layout.stem_copies_drop_in;
  stemSshDropIn = layout.stem_copies_ssh_drop_in;

  copyAssertions =
    copies:
    concatLists (
      mapAttrsToList
        (
          name: t:
          let
            ssh = hasPrefix "ssh://" t.target;
            s3 = hasPrefix "s3://" t.target;
            sealed = isSealedTarget t;
            opt = "services.tacid.copies.\"${name}\"";
            # A copy on the tacid disk itself is no copy: it dies with the disk.
            onLayout = filter (s: s.mount_point != null && s.mount_point != "/" && (t.target == s.mount_point || hasPrefix "${s.mount_point}/" t.target)) mounted;
          in
          [
            {
              assertion = builtins.match layout.copy_target_name_pattern name != null;
              message = "${opt}: a target's name is what people type after --to; it must match ${layout.copy_target_name_pattern}. Rename the target.";
            }
            {
              assertion = ssh -> (t.identityFile != null && t.hostKey != null);
              message = "${opt}: an SSH target needs identityFile (the ${if sealed then "copier's" else "stem's"} private key) and hostKey (the host's public key, pinned). Set both.";
            }
            {
              assertion = !ssh -> (t.identityFile == null && t.hostKey == null);
              message = "${opt}: identityFile and hostKey are for SSH targets; ${t.target} is ${if s3 then "an object store" else "a directory on this machine"}. Remove them.";
            }
            {
              assertion = ssh || s3 || onLayout == [ ];
              message = "${opt}: ${t.target} is on the tacid disk itself (under ${(head (onLayout ++ [{ mount_point = ""; }])).mount_point}), and a copy there dies with the disk. Choose a directory on another ${if sealed then "disk" else "Btrfs"}.";
            }
            {
              assertion = s3 -> t.seal.credentialsFile != null;
              message = "${opt}: an s3:// target needs seal.credentialsFile (a JSON file with access_key_id and secret_access_key, owned by ${layout.copier_user}, mode 0400). Set it.";
            }
            {
              assertion = !s3 -> t.seal.credentialsFile == null;
              message = "${opt}: seal.credentialsFile is for s3:// targets; ${t.target} is not one. Remove it.";
            }
          ]
        )
        copies
    );

  assertionsFor =
    { device
    , initrdSystemd
    , fileSystems
    , approverGroup
    , groups
    , preSwitchSubvolumes
    , copies ? { }
    ,
    }:
    [
      {
        assertion = initrdSystemd;
        message = "services.tacid: boot.initrd.systemd.enable must be true; tacid puts back a staged restore and remakes ${layout.root_subvolume} in systemd units in the initrd. Set boot.initrd.systemd.enable = true;";
      }
      {
        assertion = elem approverGroup groups;
        message = "services.tacid.approverGroup: the group \"${approverGroup}\" does not exist, so nobody but root could approve a restore. Define users.groups.\"${approverGroup}\" = { }; and add the people who may approve, or set services.tacid.approverGroup to an existing group.";
      }
    ]
    ++ map
      (
        s:
        let
          problem = fsProblem device fileSystems s;
          what = if builtins.isAttrs problem then problem.what else toString problem;
          fix =
            if builtins.isAttrs problem then
              problem.fix
            else
              "The tacid module declares this mount itself: remove fileSystems.\"${s.mount_point}\" from your configuration (often hardware-configuration.nix), or set services.tacid.device to the device it names; make the disk with scripts/make-disk-layout.sh.";
        in
        {
          assertion = problem == null;
          message = "services.tacid: fileSystems.\"${s.mount_point}\" must be the Btrfs subvolume ${s.name} of services.tacid.device, but ${what}. ${fix}";
        }
      )
      mounted
    ++ map
      (name: {
        assertion = elem name snapshottable;
        message = "services.tacid.preSwitchSnapshot.subvolumes: \"${name}\" cannot be snapshotted (these can: ${concatStringsSep ", " snapshottable}). Remove it from the list.";
      })
      preSwitchSubvolumes
    ++ copyAssertions copies;

  # The one-shot override of the pre-switch snapshot (ADR 0009): root-only, as /run is
  # root's, and gone at the next boot.
  preSwitchSkipFile = "/run/tacid-skip-pre-switch-snapshot";

  shellQuote = s: "'" + builtins.replaceStrings [ "'" ] [ "'\\''" ] s + "'";

  # The fragment for system.preSwitchChecks. switch-to-configuration runs the *incoming*
  # configuration's checks as root, for every action (check and dry-activate too), with
  # the incoming toplevel as $1; a non-zero exit stops the switch before anything is
  # activated or the boot loader installed. Newer ones pass the action as $2; older ones
  # pass only the toplevel, but every one sets NIXOS_ACTION in the check's environment
  # (adr/0009). With neither, the action is unknown and a snapshot is taken: a switch may
  # be under way.
  # The set's reason names the generation left (the link to the running system) and the
  # one switched to (the link to the incoming toplevel; nixos-rebuild has already pointed
  # the profile at it), in the grammar of layout::switch, which the keeper holds it to.
  # It goes as the reason because the CLI is the running system's: an older one knows no
  # new flag. Only what the check has verified goes in: a generation is digits, a toplevel
  # a bounded path of store-path characters.
  # PATH is not to be trusted there (nixos-rebuild runs it under systemd-run), so every
  # tool comes by absolute path.
  preSwitchScript =
    {
      # The running system's CLI: it matches the running keeper.
      tacid
    , coreutils
    , skipFile
    , snapshotArgs
      # Where the system profile and its generation links are, and the running system;
      # a test points them elsewhere.
    , profilesDir ? layout.system_profiles_dir
    , currentSystem ? "/run/current-system"
    ,
    }:
    let
      profile = "${profilesDir}/${layout.system_profile}";
    in
    ''
      incoming="''${1:-}"
      action="''${2:-''${NIXOS_ACTION:-}}"
      readlink=${coreutils}/bin/readlink
      case "$action" in
        check | dry-activate) exit 0 ;;
      esac
      if [ -n "$incoming" ] && [ "$($readlink -f ${currentSystem})" = "$($readlink -f "$incoming")" ]; then
        echo "tacid: no snapshot before this switch: $incoming is already the running configuration."
        exit 0
      fi
      if [ -e ${skipFile} ]; then
        ${coreutils}/bin/rm -f ${skipFile}
        echo "tacid: NO snapshot before this switch: ${skipFile} was there (now removed; the next switch takes one again)." >&2
        exit 0
      fi
      if [ ! -x ${tacid} ]; then
        echo "tacid: no snapshot before this switch: the running system has no ${tacid} yet (first switch to a configuration with tacid); the next switch takes one."
        exit 0
      fi
      # gen: the N of a link named ${layout.system_profile}-N-link, when N is a number.
      gen_of() {
        gen="''${1##*/}"
        gen="''${gen#${layout.system_profile}-}"
        gen="''${gen%-link}"
        case "$gen" in
          "" | *[!0-9]* | 0*) return 1 ;;
        esac
        [ "''${#gen}" -le 18 ]
      }
      # -ef compares what two paths resolve to, with no tool to run per link.
      from=""
      to=""
      for link in ${profilesDir}/${layout.system_profile}-*-link; do
        gen_of "$link" || continue
        if [ "$link" -ef ${currentSystem} ] && [ "$gen" -gt "''${from:-0}" ]; then from="$gen"; fi
        if [ -n "$incoming" ] && [ "$link" -ef "$incoming" ] && [ "$gen" -gt "''${to:-0}" ]; then to="$gen"; fi
      done
      profile_gen=""
      if gen_of "$($readlink ${profile} 2>/dev/null || true)"; then profile_gen="$gen"; fi
      if [ -n "$profile_gen" ] && [ -n "$incoming" ] && [ ${profile} -ef "$incoming" ]; then to="$profile_gen"; fi
      if [ -n "$profile_gen" ] && [ ${profile} -ef ${currentSystem} ]; then from="$profile_gen"; fi
      reason="before switching"
      if [ -n "$from" ]; then reason="$reason from generation $from"; fi
      if [ -n "$to" ] && [ -n "$from" ]; then
        reason="$reason to $to"
      elif [ -n "$to" ]; then
        reason="$reason to generation $to"
      else
        case "$incoming" in
          /*[!A-Za-z0-9+._?=/-]* | *//* | */./* | */../* | */. | */.. | */) ;;
          /?*) if [ "''${#incoming}" -le 256 ]; then reason="$reason to $incoming"; fi ;;
        esac
      fi
      if ${tacid} data snapshot --pre-switch ${concatStringsSep " " (map shellQuote snapshotArgs)} --reason "$reason"; then
        exit 0
      fi
      # What is true now, under either order: nixos-rebuild points the profile at the new
      # generation before it runs switch-to-configuration; run directly, nothing has.
      echo "tacid: the snapshot before this switch failed (see above), so the switch was stopped before anything was activated or the boot loader installed: the running system''${from:+ (generation $from)} and what the next boot starts are as they were." >&2
      if [ -n "$incoming" ] && [ ${profile} -ef "$incoming" ]; then
        echo "  But the system profile ${profile} already points at the configuration not switched to''${to:+ (generation $to)}: nixos-rebuild sets it before it switches, and until it is set back, nixos-rebuild --rollback starts from it." >&2
        if [ -n "$from" ]; then
          echo "  To set the profile back: nix-env -p ${profile} --switch-generation $from" >&2
        else
          echo "  To set the profile back: nix-env -p ${profile} --rollback (to the generation numbered just below it); nix-env -p ${profile} --list-generations lists them." >&2
        fi
      elif [ ! -e ${profile} ]; then
        echo "  There is no system profile at ${profile}: nothing was changed." >&2
      elif [ ${profile} -ef ${currentSystem} ]; then
        echo "  The system profile ${profile} still points at the running system: nothing was changed." >&2
      else
        echo "  The system profile ${profile} points at ''${profile_gen:+generation }''${profile_gen:-something else}, neither the running system nor the configuration not switched to; nix-env -p ${profile} --list-generations lists them." >&2
        if [ -n "$from" ]; then
          echo "  To set the profile back to the running system: nix-env -p ${profile} --switch-generation $from" >&2
        fi
      fi
      echo "  To switch once without a snapshot: touch ${skipFile} as root, then run the same switch again." >&2
      echo "  To stop taking snapshots before switches: set services.tacid.preSwitchSnapshot.enable = false;" >&2
      exit 1
    '';

  # Shell printing a systemd drop-in that sets the value after `flag` in the unit's one
  # ExecStart= line and keeps every other word of it, so the module retypes nothing of
  # the shipped command line; it fails when the line has no such flag.
  execStartDropIn = { unit, flag, value }: execStartDropInAll { inherit unit; values = [{ inherit flag value; }]; };

  # The same for several flags at once: `values` is a list of { flag; value; }.
  execStartDropInAll =
    { unit, values }:
    ''
            exec_start="$(grep '^ExecStart=' ${unit})"
            ${concatStringsSep "
      " (map (v: ''
              case "$exec_start" in
                *" ${v.flag} "*) ;;
                *)
                  echo "${unit}: its ExecStart has no ${v.flag}, so it cannot be set to ${v.value}" >&2
                  exit 1
                  ;;
              esac'') values)}
            echo '[Service]'
            echo 'ExecStart='
            echo "$exec_start" | sed -E ${concatStringsSep " " (map (v: "-e 's| ${v.flag} [^ ]+| ${v.flag} ${v.value}|'") values)}
    '';

  # Shell printing the drop-in that makes the timeline service prune only, for
  # services.tacid.retention.timeline = false: the timer still runs every hour, so the
  # retention rules and the free-space floor are still applied (adr/0013). Its ExecStart
  # becomes the unit's own ExecStopPost (the prune), word for word, which is then cleared;
  # it fails when the unit has not exactly one ExecStopPost= running `data prune`.
  pruneOnlyDropIn =
    { unit }:
    ''
      if [ "$(grep -c '^ExecStopPost=' ${unit})" != 1 ]; then
        echo "${unit}: it has not exactly one ExecStopPost=, so it cannot be made to prune only" >&2
        exit 1
      fi
      prune="$(grep '^ExecStopPost=' ${unit})"
      case "$prune" in
        *" data prune") ;;
        *)
          echo "${unit}: its ExecStopPost= is not \`data prune\` ($prune), so it cannot be made to prune only" >&2
          exit 1
          ;;
      esac
      echo '[Unit]'
      echo 'Description=tacid timeline: retention only (timeline snapshots are off)'
      echo '[Service]'
      echo 'ExecStart='
      echo "ExecStart=''${prune#ExecStopPost=}"
      echo 'ExecStopPost='
    '';

  # The name of the module's drop-ins in the shipped units' .d directories. Drop-ins
  # apply in the order of their names, across directories; a test's drop-in that must win
  # over the module's sorts after it.
  moduleDropIn = "services-tacid.conf";

  # The package's install steps for everything it ships besides the binaries.
  installCommands = concatStringsSep "\n" (
    map (e: "install -Dm644 ${sourcePath e} \"$out/${installedPath e}\"") shipped.files
  );

  # The daemons' units name programs the FHS way (/usr/bin/tacid-keeper, /usr/bin/install);
  # in the package they name store paths: the package's own binaries, and each tool
  # listed in shipped.json at the path given in toolPaths (tool name -> absolute path).
  systemUnitFiles = map installedPath (filter (e: elem e.install_dir [ "lib/systemd/system" "lib/systemd/user" ]) shipped.files);
  rewriteUnitPaths =
    toolPaths:
    let
      dir = shipped.unit_paths.binaries_dir;
      tools = builtins.attrNames shipped.unit_paths.tools;
      missing = filter (t: !(toolPaths ? ${t})) tools;
      toolRewrites = concatStringsSep " " (map (t: "-e 's|${dir}/${t} |${toolPaths.${t}} |g'") tools);
    in
    if missing != [ ] then
      throw "tacid: rewriteUnitPaths needs a path for ${toString missing}"
    else
      concatStringsSep "\n" (
        map (f: "sed -i ${toolRewrites} -e \"s|${dir}/|$out/bin/|g\" \"$out/${f}\"") systemUnitFiles
      );
in
{
  inherit
    layout
    shipped
    serviceAttrName
    timerAttrName
    mounted
    snapshotByDefault
    snapshottable
    restorableMounted
    fileName
    sourcePath
    installedPath
    initrdUnits
    initrdUnitsDir
    enabledInitrdUnits
    enabledSystemUnits
    wantedByFor
    fileSystemsFor
    tmpfilesRules
    kernelParamsFor
    hardFloorParamsFor
    assertionsFor
    persistDir
    persistedPath
    essentialDirs
    essentialFiles
    sysrootMountUnit
    persistEssentialsInitrdScript
    persistEssentialsSaveScript
    declaredWayIn
    mountHolding
    persistenceAssertions
    copyUnitName
    verifyUnitName
    copierTmpfilesRules
    isSealedTarget
    stemCopyDropInsDir
    stemCopyDropIn
    stemSshDropIn
    preSwitchScript
    preSwitchSkipFile
    installCommands
    systemUnitFiles
    rewriteUnitPaths
    execStartDropIn
    execStartDropInAll
    pruneOnlyDropIn
    moduleDropIn
    ;
}
