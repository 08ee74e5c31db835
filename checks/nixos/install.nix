# checks.<system>.install (x86_64-linux, aarch64-linux): the boot tier's story, on NixOS.
#
# Install the layout on an empty disk, boot it, write a file, snapshot, change it, stage
# the restore, reboot: the file is back and everything written since is gone; reboot
# again: no second restore. Then a switch takes a pre-switch snapshot set, a failed one
# stops the switch, and the override lets exactly one switch through. Last, health: the
# timeline's run writes the metrics, and the alert unit gives root's command the report.
#
# The machine first boots an ordinary NixOS from its own disk (/dev/vda, the root image
# qemu-vm.nix makes with a boot partition when useBootLoader is on), makes the layout on
# the empty second disk (/dev/vdb, virtualisation.emptyDiskImages), then boots the
# `tacid` specialisation through systemd-boot, whose root is the layout on that disk.
# Each reboot is machine.shutdown() and machine.start(): qemu-vm.nix's start script
# creates the root image, the empty disks and the EFI variables only when they do not
# exist yet, so every boot after the first is of the same disks.
# Names come from the evaluated configuration and the layout, not from literals.
#
# Read against upstream's testing framework (nixos/lib/testing/, virtualisation/
# qemu-vm.nix, test-driver) but NOT RUN where this was written (no Nix builder there);
# its Python is linted and type-checked as the driver would (checks/nix-checks.sh). See
# docs/nixos.md.
{ tacidModule, makeDiskLayout }:
let
  tacidLib = import ../../nixos-modules/lib.nix;
  inherit (tacidLib) layout shipped;
  cli = shipped.binaries.cli.name;
  # The story's file lives on the first restorable subvolume (/persist).
  data = builtins.head tacidLib.restorableMounted;
in
{
  name = "tacid-install";

  nodes.machine = { pkgs, ... }: {
    imports = [ tacidModule ];

    virtualisation = {
      emptyDiskImages = [ 2048 ];
      useBootLoader = true;
      useEFIBoot = true;
      # The store comes from the host, so the empty disk needs no store of its own.
      mountHostNixStore = true;
      memorySize = 1536;
    };
    boot.loader.systemd-boot.enable = true;
    boot.loader.efi.canTouchEfiVariables = true;
    boot.initrd.systemd.enable = true;
    environment.systemPackages = [ makeDiskLayout pkgs.btrfs-progs ];

    specialisation =
      let
        tacidOn = marker: { config, ... }: {
          services.tacid.enable = true;
          # NixOS VM tests replace fileSystems with virtualisation.fileSystems; give them
          # the layout's mounts, exactly as the module declares them.
          virtualisation.useDefaultFilesystems = false;
          virtualisation.fileSystems = config.services.tacid.fileSystems;
          environment.etc."tacid-test-configuration".text = marker;
          # Health, alerts and metrics (adr/0028): root's alert command keeps what it is
          # given; the timers write the metrics where node_exporter would read them.
          services.tacid.alerts.command = ''
            cat > /run/tacid-test-alert
            echo "$TACID_ALERT_UNIT $TACID_HEALTH_LEVEL" >> /run/tacid-test-alert
          '';
          services.tacid.metrics.directory = "/run/tacid-test-metrics";
          systemd.tmpfiles.rules = [ "d /run/tacid-test-metrics 0755 root root -" ];
        };
      in
      {
        tacid.configuration = tacidOn "first";
        tacid-next.configuration = tacidOn "next";
      };
  };

  testScript = { nodes, ... }:
    let
      first = nodes.machine.specialisation.tacid.configuration;
      next = nodes.machine.specialisation.tacid-next.configuration;
      mountPoints = builtins.attrNames first.services.tacid.fileSystems;
      preSwitchSet = first.services.tacid.preSwitchSnapshot.subvolumes;
      # The module's drop-in for the keeper (tacid.nix), and the test's, which must sort
      # after it.
      dropIn = tacidLib.moduleDropIn;
      breakDropIn = "zz-tacid-test-break.conf";
    in
    assert breakDropIn > dropIn;
    ''
      import json
      from typing import Any

      data = "${data.mount_point}"
      installed_disk = "/dev/vdb"  # virtualisation.emptyDiskImages: the drive after the root disk


      def tacid_json(args: str) -> Any:
          return json.loads(machine.succeed(f"${cli} {args} --json"))


      def boot_id() -> str:
          return machine.succeed("cat /proc/sys/kernel/random/boot_id").strip()


      def reboot() -> None:
          # A real reboot: the VM powers off and starts again from the same disk images
          # (qemu-vm.nix keeps the root image, the empty disks and the EFI variables in the
          # test's state directory), so only what is on the disks survives.
          before = boot_id()
          machine.shutdown()
          machine.start()
          machine.wait_for_unit("multi-user.target")
          assert boot_id() != before, "the machine did not boot again"


      with subtest("install the layout on an empty disk"):
          machine.wait_for_unit("multi-user.target")
          assert machine.succeed("findmnt -n -o SOURCE /").startswith("/dev/vda"), "the first system runs from the root disk"
          machine.fail(f"blkid {installed_disk}")  # empty: no filesystem, no partition table
          machine.succeed(f"make-disk-layout {installed_disk}")
          machine.fail(f"make-disk-layout {installed_disk}")  # it holds a filesystem now

      with subtest("the first switch to tacid takes no snapshot, and says why"):
          out = machine.succeed("${first.system.build.toplevel}/bin/switch-to-configuration boot 2>&1")
          assert "no snapshot before this switch" in out, out
          # Boot the tacid configuration by default from now on: systemd-boot's entry for the
          # specialisation (the builder writes one per specialisation of each generation)
          # becomes loader.conf's default.
          machine.succeed(
              "entry=$(grep -lF -- '${first.system.build.toplevel}/init' /boot/loader/entries/*.conf | head -n1); "
              "test -n \"$entry\"; "
              "sed -i '/^default /d' /boot/loader/loader.conf; "
              "echo \"default $(basename \"$entry\")\" >>/boot/loader/loader.conf"
          )
          machine.succeed("sync")

      with subtest("boot the layout: systemd initrd, the root made again from its blank, on the installed disk"):
          reboot()
          machine.succeed("test \"$(readlink -f /run/current-system)\" = ${first.system.build.toplevel}")
          assert "(initrd)" in machine.succeed("systemd-analyze")
          machine.succeed("findmnt -n -o FSTYPE,OPTIONS / | grep -E 'btrfs.*subvol=/?${layout.root_subvolume}(,|$)'")
          root_device = machine.succeed("findmnt -n -o SOURCE /").strip()
          assert root_device.startswith(f"{installed_disk}["), f"/ is {root_device}, not on {installed_disk}"
          machine.succeed(f"test \"$(readlink -f ${layout.default_device})\" = {installed_disk}")
          for mount_point in ${builtins.toJSON mountPoints}:
              machine.succeed(f"findmnt -n {mount_point}")
          machine.succeed("test \"$(stat -c %a ${layout.snapshots_mount_point})\" = 700")
          machine.succeed("test \"$(stat -c %U ${layout.snapshots_mount_point}/${layout.keeper_dir})\" = ${layout.keeper_user}")
          assert tacid_json("data status")["stem_running"]

      with subtest("write a file, take a snapshot"):
          machine.succeed(f"echo tuesday > {data}/story")
          taken = tacid_json("data snapshot --reason 'the install check'")
          snapshot = next(s["name"] for s in taken["snapshots"] if s["of"] == "${data.name}")

      with subtest("change the file, write more, stage the restore"):
          machine.succeed(f"echo wednesday > {data}/story")
          machine.succeed(f"touch {data}/written-after-the-snapshot /on-the-ephemeral-root")
          exit_code, words = machine.execute(f"${cli} data restore {snapshot}")
          assert exit_code == 3, f"a restore without --yes shows the cost and changes nothing (exit 3), got {exit_code}: {words}"
          assert data in words, words
          staged = tacid_json(f"data restore {snapshot} --yes")
          assert staged["staged"]["reboot_needed"], staged
          assert machine.succeed(f"cat {data}/story").strip() == "wednesday"  # not before the reboot

      with subtest("reboot: the file is back and everything since is gone"):
          reboot()
          assert machine.succeed(f"cat {data}/story").strip() == "tuesday"
          machine.fail(f"test -e {data}/written-after-the-snapshot")
          machine.fail("test -e /on-the-ephemeral-root")
          status = tacid_json("data status")
          assert status["outcome_result"] == "done", status
          assert status["staged_snapshot"] is None, status

      with subtest("reboot again: no second restore"):
          machine.succeed(f"echo thursday > {data}/story")
          reboot()
          assert machine.succeed(f"cat {data}/story").strip() == "thursday"
          assert tacid_json("data status")["staged_snapshot"] is None

      with subtest("what NixOS needs outlives the ephemeral root: a password set with passwd, a user added by hand, the machine id, the uid map"):
          # users.mutableUsers is true: only /etc/shadow remembers these (adr/0022).
          machine.succeed("echo 'root:tacid-test-password' | chpasswd")
          machine.succeed("useradd --create-home tacid-by-hand && echo 'tacid-by-hand:its-password' | chpasswd")
          kept = {
              path: machine.succeed(f"cat {path}")
              for path in ["/etc/machine-id", "/var/lib/nixos/uid-map"]
          }
          root_hash = machine.succeed("getent shadow root | cut -d: -f2").strip()
          by_hand_hash = machine.succeed("getent shadow tacid-by-hand | cut -d: -f2").strip()
          assert root_hash.startswith("$"), f"chpasswd set no hash for root: {root_hash}"
          machine.wait_until_succeeds("cmp /etc/shadow ${tacidLib.persistDir}/etc/shadow")  # saved when it changed
          shadow_mode = machine.succeed("stat -c '%a %U %G' /etc/shadow").strip()
          kept_mode = machine.succeed("stat -c '%a %U %G' ${tacidLib.persistDir}/etc/shadow").strip()
          assert kept_mode == shadow_mode, f"the kept shadow is {kept_mode}, the live one {shadow_mode}"
          machine.fail("ls ${tacidLib.persistDir}/etc | grep -F .tacid-")  # no temporary copy left
          reboot()
          assert machine.succeed("stat -c '%a %U %G' /etc/shadow").strip() == shadow_mode, "the shadow's mode or owner changed across the reboot"
          for path, contents in kept.items():
              assert machine.succeed(f"cat {path}") == contents, f"{path} changed across the reboot"
          assert machine.succeed("getent shadow root | cut -d: -f2").strip() == root_hash, "root's password was lost"
          assert machine.succeed("getent shadow tacid-by-hand | cut -d: -f2").strip() == by_hand_hash, "a user's password was lost"
          machine.succeed("test -d /home/tacid-by-hand")
          machine.succeed("findmnt -n /var/lib/nixos && findmnt -n /var/lib/systemd")

      with subtest("a switch takes a pre-switch snapshot set"):
          before = {s["name"] for s in tacid_json("data list")["snapshots"]}
          machine.succeed("${next.system.build.toplevel}/bin/switch-to-configuration test")
          machine.succeed("grep -qx next /etc/tacid-test-configuration")
          taken = [s for s in tacid_json("data list")["snapshots"] if s["name"] not in before]
          assert sorted(s["of"] for s in taken) == sorted(${builtins.toJSON preSwitchSet}), taken
          assert all(s["pre_switch"] for s in taken), taken
          assert all("${next.system.build.toplevel}" in s["reason"] for s in taken), taken
          assert len({s["set_id"] for s in taken}) == 1, taken

      with subtest("a failed pre-switch snapshot stops the switch"):
          # Break the keeper for now with a runtime drop-in (units live read-only in the
          # store). Drop-ins apply in the order of their file names across directories, so
          # this one sorts after the module's ${dropIn}, or the module's ExecStart= would
          # win and the keeper would start.
          machine.succeed(
              "mkdir -p /run/systemd/system/${layout.keeper_unit}.d && "
              "printf '[Service]\\nExecStart=\\nExecStart=/run/current-system/sw/bin/false\\n' "
              ">/run/systemd/system/${layout.keeper_unit}.d/${breakDropIn} && "
              "systemctl daemon-reload && systemctl stop ${layout.keeper_unit}"
          )
          exec_start = machine.succeed("systemctl show -p ExecStart --value ${layout.keeper_unit}")
          assert "/bin/false" in exec_start, f"the breaking drop-in is not the one in effect: {exec_start}"
          exit_code, out = machine.execute("${first.system.build.toplevel}/bin/switch-to-configuration test 2>&1")
          assert exit_code != 0, out
          assert "touch ${tacidLib.preSwitchSkipFile}" in out, out
          machine.succeed("grep -qx next /etc/tacid-test-configuration")  # nothing changed
          # Mend the keeper. It failed and was restarted until systemd gave up
          # (Restart=on-failure, the start limit): forget that, or it would stay failed.
          machine.succeed(
              "rm -r /run/systemd/system/${layout.keeper_unit}.d && systemctl daemon-reload && "
              "systemctl reset-failed ${layout.keeper_unit}"
          )
          tacid_json("data status")  # the keeper answers again

      with subtest("the override lets one switch through without a snapshot, once"):
          before = {s["name"] for s in tacid_json("data list")["snapshots"]}
          machine.succeed("touch ${tacidLib.preSwitchSkipFile}")
          out = machine.succeed("${first.system.build.toplevel}/bin/switch-to-configuration test 2>&1")
          assert "NO snapshot before this switch" in out, out
          machine.succeed("grep -qx first /etc/tacid-test-configuration")
          machine.fail("test -e ${tacidLib.preSwitchSkipFile}")  # used up
          assert {s["name"] for s in tacid_json("data list")["snapshots"]} == before, "the override switch took a snapshot"

      with subtest("health: the timeline's run writes the metrics; a failed timer's alert gives root's command the report"):
          machine.succeed("systemctl start ${layout.timeline_unit}")
          machine.succeed("grep -q '^tacid_health_level ' /run/tacid-test-metrics/tacid.prom")
          code, out = machine.execute("${cli} data health")
          assert code in (0, 16), f"health exited {code}: {out}"
          health = tacid_json("data health")
          assert health["level"] in ("ok", "warn"), health
          # What the timeline unit's OnFailure= starts, started as systemd would.
          alert_unit = "${builtins.replaceStrings [ "@." ] [ "@${layout.timeline_unit}." ] layout.alert_unit}"
          machine.succeed(f"systemctl start {alert_unit}")
          alert = machine.succeed("cat /run/tacid-test-alert")
          assert "${layout.timeline_unit} failed on this machine" in alert, alert
          assert "tacid health:" in alert, alert
          assert alert.strip().split("\n")[-1].startswith("${layout.timeline_unit} "), alert
          machine.succeed(f"journalctl -p warning -u {alert_unit} | grep -q 'failed on this machine'")
    '';
}
