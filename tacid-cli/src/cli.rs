//! The command line, as clap types: the one source of `--help`, the man page and the
//! shell completions.

use clap::{Args, Parser, Subcommand};

/// Exit codes, one per class of outcome (documented in `--help` and the man page).
pub mod exit {
    /// Done.
    pub const OK: u8 = 0;
    /// Something failed that has no class of its own (the message says what).
    pub const FAILED: u8 = 1;
    /// The command line is wrong (clap's own code).
    pub const USAGE: u8 = 2;
    /// `restore` without `--yes`: the cost was shown; nothing changed.
    pub const PREVIEW_ONLY: u8 = 3;
    /// You may not do this (not root, not in the approver group).
    pub const NOT_AUTHORIZED: u8 = 4;
    /// No such snapshot or set, or a name that is not one.
    pub const NOT_FOUND: u8 = 5;
    /// Refused for that subvolume or state: not restorable, another restore staged, the
    /// words of the preview not shown.
    pub const REFUSED: u8 = 6;
    /// The stem (the privileged half) is not running.
    pub const STEM_NOT_RUNNING: u8 = 7;
    /// The keeper is not running, or the bus cannot be reached.
    pub const KEEPER_UNREACHABLE: u8 = 8;
    /// The keeper's journal or the stem failed; nothing was done.
    pub const KEEPER_FAILED: u8 = 9;
    /// Protected: the staged restore names the snapshot, or a person marked it to keep.
    pub const PROTECTED: u8 = 10;
    /// The free space is below the hard floor; no snapshot was taken.
    pub const NO_SPACE: u8 = 11;
    /// The copy target failed: unreachable, its host key changed, not Btrfs, full, or the
    /// transfer died (nothing half-received is left on it); of the timer's act, any copy.
    pub const TARGET_FAILED: u8 = 12;
    /// An open snapshot is in use (a process has its working directory, a file or a
    /// mapping in it): not closed, or not deleted; the message names what holds it.
    pub const IN_USE: u8 = 13;
    /// The copier (which seals and keeps the copies of sealed targets) is not running, or
    /// cannot act (no recovery key yet, an unsafe key or credentials file).
    pub const COPIER: u8 = 14;
    /// A sealed copy failed verification, or a target served something this machine's key
    /// does not authenticate: what it holds is not what was copied.
    pub const UNTRUSTED: u8 = 15;
    /// `health`: something needs a look soon (a timer late, a copy failed, the free space
    /// below the floor); each line says what to do.
    pub const HEALTH_WARN: u8 = 16;
    /// `health`: the rollback is failing now (no snapshot for a day, snapshots refused, the
    /// stem down, copies that do not verify); each line says what to do.
    pub const HEALTH_FAIL: u8 = 17;
}

/// The exit codes, with the approver group's default from the layout.
fn exit_table() -> String {
    EXIT_TABLE.replace("{approver_group}", layout::defaults::APPROVER_GROUP)
}

const EXIT_TABLE: &str = "\
Exit codes:
  0  done
  1  failed, for a reason with no code of its own (the message says what)
  2  the command line is wrong
  3  restore without --yes: the cost was shown; nothing changed
  4  you may not do this: only root and the approver group (default: {approver_group}) may
     snapshot, restore, cancel, delete, keep, prune, copy or fetch
  5  no such snapshot, set or copy target, or not a snapshot name (see `tacid data list`)
  6  refused: that subvolume is not restorable, another restore is staged, the
     words of the preview were not the ones shown, another copy to that target is
     running, a fetched snapshot is already here, or an open was refused (too many
     open, or your home was not yours in that snapshot)
  7  the stem is not running (start tacid-stem.service)
  8  the keeper is not running or the bus cannot be reached (start tacid-keeper.service)
  9  the keeper's journal or the stem failed; nothing was done
 10  protected: the staged restore names that snapshot, or it is marked to keep
 11  the free space is below the hard floor: no snapshot was taken (prune or delete)
 12  the copy target failed: unreachable or stopped answering, its host key changed,
     not Btrfs or on the tacid disk itself, full, or the transfer died (nothing
     half-received is left on it; the next run tries again)
 13  in use: the snapshot is open and a process has its working directory, a file
     or a mapping in it, so it was not closed or not deleted; the message names
     the processes of yours that hold it (leave it, then try again)
 14  the copier is not running (start tacid-copier.service), or cannot act: no
     recovery key yet (`tacid-copier key init` as root), or its key or a credentials
     file is not its own alone; sealed targets need it, Btrfs targets do not
 15  a sealed copy failed verification, or its target served something this
     machine's key does not authenticate (a changed or missing part, another copy's,
     an older one): nothing of it was received; make a new copy
 16  health: warning: something needs a look soon (a timer late or failed, a copy
     failed, the free space below the floor); each line says what to do
 17  health: failing: the rollback is failing now (no snapshot for a day, snapshots
     refused below the hard floor, the stem not running, copies that do not verify)";

const BOUNDARIES: &str = "\
What tacid does not do:
  A snapshot lives on the same disk as what it is of: it is no backup against a dead
  disk; copy it off the disk with `tacid data copy` (to a target root configured).
  A restore puts back files, not the world outside: mail sent stays sent, money paid
  stays paid.";

const COPYING: &str = "\
Copies off the disk:
  A copy is the answer to \"a snapshot is no backup\": the snapshot sent, as it is, to
  another Btrfs, a second disk in the machine or a backup host over SSH, and kept
  there read-only, verified, under the snapshot's own name. Each copy is sent
  incrementally against the newest snapshot both sides hold (a full copy only when
  there is none), so a daily copy costs what changed.

  A target is a name root gave a place in /etc/tacid/copies.json (on NixOS,
  services.tacid.copies.<name>): a directory on another mounted Btrfs, or
  ssh://[user@]host[:port]/path with a pinned host key. Targets are root's
  configuration, never a caller's: a command names a target, never a path or a host,
  and the send stream goes from the stem to the target, never through you.

  Each target keeps its copies by its own counts (the newest few of each subvolume,
  and the newest of each of the last days, weeks and months), and never deletes the
  newest copy of a subvolume, nor the newest one whose snapshot is still here: the
  next incremental copy is sent against it. Every
  copy, fetch, deletion on a target and failure is journalled, with who asked or
  which rule (a target's timer, its retention).

  After a disk dies: put in a new disk, make the layout, `tacid data copies TARGET`
  says what the target holds, `tacid data fetch NAME --from TARGET` brings a copy
  back into the local store, and `tacid data restore NAME` puts it back at the next
  boot, as for any snapshot. Copies fetched one by one (each subvolume from its own
  target) go back together at one boot: `tacid data restore NAME NAME NAME`.

Progress:
  While a copy or fetch runs, a line on stderr says the bytes sent and the rate,
  rewritten each second when stderr is a terminal; otherwise (a timer's unit, a
  pipe) a plain line every 30 seconds, so a journal shows a long copy's progress
  without a line a second.

Examples:
  tacid data copy @home.2026-12-01T140200.123456Z --to usb
      copy one snapshot to the target usb
  tacid data copy --to usb
      what a target's timer runs: the newest snapshot of each subvolume usb lacks,
      then usb's retention
  tacid data copies usb
      what usb holds
  tacid data fetch @home.2026-12-01T140200.123456Z --from usb
      bring that copy back into the local store (then `tacid data restore` it)";

const VERIFYING: &str = "\
Verifying sealed copies:
  A sealed target (a directory on any filesystem, an SSH host, or S3-compatible
  object storage) keeps each copy compressed, encrypted and authenticated by this
  machine's key, in parts, with a manifest naming every part's size and digest.
  Nobody without the key, the storage's host included, can read a copy or make one
  that a fetch accepts.

  `tacid data verify --target TARGET` reads every part of each copy back from the
  target and checks it: its size, its digest, its authentication, and the chain
  down to the copy's full copy (an incremental copy needs every copy before it). It
  receives nothing and changes nothing. A copy that fails is journalled with what
  failed, `tacid data status` shows each target's last verification, and `tacid
  data list` marks the copy; make a new copy (`tacid data copy --to TARGET`).

  Verification reads every byte of what it checks from the target: on a cloud
  store that is download traffic, and it takes as long as a fetch would.

  Each verification is journalled with who ran it; the target's verify timer
  (tacid-verify-TARGET.timer) runs `tacid data verify --target TARGET --timer`,
  journalled as the rule \"timer of TARGET\" too, and `tacid data status` says which.

Examples:
  tacid data verify --target cloud
      check every copy on the target cloud
  tacid data verify --target usb @home.2026-12-01T140200.123456Z
      check one copy (and the copies its chain needs)";

const RESTORING: &str = "\
What a restore does:
  A restore is staged now and done by the next boot, before anything is mounted: the
  subvolume goes back to the snapshot, and everything written to it since is deleted.
  Without --yes, tacid says what that costs (files changed, added and removed since,
  and bytes written) and changes nothing. `tacid data cancel` withdraws a staged
  restore until the reboot; `tacid data status` says what the boot did, once.

Restoring a set:
  Every `tacid data snapshot` (and every switch of configuration) takes its
  snapshots together, as one set; `tacid data list` shows each snapshot's set. Name
  the set by its number, or by any of its snapshots with --set, and the preview says
  what each member costs and the total; with --yes, one request puts every member
  back together at one reboot, under one consent. --only chooses members by mount
  point or subvolume; the others stay as they are, and the preview says which.

Restoring snapshots named together:
  Several snapshots named, at most one of each subvolume, are put back together at one
  reboot as one request, under one consent, each to its own snapshot: after a dead disk,
  /home fetched from one target, /persist and /var/log from others. They need not be of
  one set, and tacid does not say they were taken at one instant: the preview says when
  each was taken and where it came from (its set, or the target it was fetched from), what
  each costs, and the total. A fetched snapshot is in no set on the new disk: a fetch
  brings back one snapshot, and the journal that knew its set died with the old disk.

Examples:
  tacid data restore @home.2026-12-01T140200.123456Z
      what putting /home back to that snapshot costs; nothing changes (exit code 3)
  tacid data restore 12
      what putting set 12 back costs, member by member and in all
  tacid data restore @home.2026-12-01T140200.123456Z --set --details
      the same, naming the set by a member, with every changed path
  tacid data restore 12 --only /persist,/var/log --yes
      stage /persist and /var/log of set 12 for the next reboot; /home stays
  tacid data restore @home.2026-12-01T140200.123456Z @persist.2026-12-01T140200.123456Z
      what putting /home and /persist back together, each to the snapshot named, costs";

const JSON_OUTPUT: &str = "\
JSON for programs:
  --json (before or after the command) prints one JSON object: the command's answer,
  with \"schema\": 1, the version of its shape, at its top. What nobody knows, or
  what names nothing, is null (an unknown uid, no set, no reason, nothing staged),
  never a stand-in value. `tacid data list --json` is {\"schema\": 1, \"snapshots\":
  [...]}, newest first (before schema 1 it was a bare array). On a failure: \"error\"
  (the keeper's error name, or null), \"message\" and \"exit_code\".";

const SHOWN_NAMES: &str = "\
How names are shown:
  File names, user names and reasons are shown escaped, in text and JSON alike, so
  that no name can move the cursor, colour the terminal or start a line of its own:
  a backslash is \\\\, and every byte of a control character, of an invisible or
  bidi character, or that is not UTF-8, is \\xHH. `printf '%b\\n' 'NAME'` gives
  the exact bytes back.";

/// What `open` shows and what it does not, for `--help` and the man pages.
fn opening() -> String {
    format!(
        "\
What open shows, and what it does not:
  `tacid data open NAME` makes a snapshot readable to you, read-only, at
  {open_dir}/<your uid>/NAME, a directory only you (and root) may enter, and
  prints where. It is the snapshot's files with yesterday's permissions: each keeps
  the owner and mode it had in the snapshot, so nobody reads there what they could
  not read then. Nothing there can be written, nothing runs from there, no device
  opens and no setuid bit counts.

  Nothing is restored. Copy the file you lost out of it (cp, a file manager) to
  where you want it; your home as it is now is not touched.

  If you are not root or in the approver group, you may open only your own home as
  it was, in a snapshot of {homes} (the home the user database gives you, which
  must be directly under {homes}, and which must have been a directory of yours
  in the snapshot). Root and the approver group may open any snapshot whole.

  It closes with `tacid data close NAME`, by itself after {idle} minutes unused
  (the administrator may set another time), and at a reboot; never while a program
  still uses it (a shell sitting in it, a file open there): a close then says which
  programs of yours hold it (exit code 13), and an idle one closes once they let go.
  An open snapshot is not deleted, by an approver or by retention, until it closes. `tacid data list` says which of yours are open, and where.
  Every open and close is journalled, with who and where.

Finding the file first:
  `tacid data diff NAME [PATH]` lists what changed since the snapshot in your home
  (or below PATH, e.g. {homes}/alice/docs): added, changed and removed, counted.
  Root and the approver group may name any path under the snapshot's mount point.
  How many bytes were written cannot be said for a home or a directory: Btrfs
  counts those for the whole subvolume only.

Examples:
  tacid data diff @home.2026-12-01T140200.123456Z
      what changed in your home since then
  tacid data open @home.2026-12-01T140200.123456Z
      open it read-only; prints the path
  cp {open_dir}/1000/@home.2026-12-01T140200.123456Z/notes.txt ~/notes.txt
      take one file back (1000: your uid)
  tacid data close @home.2026-12-01T140200.123456Z
      close it",
        open_dir = layout::OPEN_DIR,
        homes = layout::HOMES_MOUNT_POINT,
        idle = layout::defaults::OPEN_IDLE_SECS / 60,
    )
}

/// tacid: snapshots of /persist, /var/log and /home, and restores honoured at the next boot.
#[derive(Debug, Parser)]
#[command(
    name = "tacid",
    version,
    about = "Snapshots of /persist, /var/log and /home, and restores honoured at the next boot",
    long_about = "Snapshots of /persist, /var/log and /home on Btrfs, and restores that the next \
boot honours. A restore deletes everything written since the snapshot, so tacid always says \
what is lost before it stages one, and nothing is put back until you reboot.",
    after_help = BOUNDARIES,
    after_long_help = format!("{BOUNDARIES}\n\n{SHOWN_NAMES}\n\n{JSON_OUTPUT}\n\n{}", exit_table()),
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Print JSON for programs instead of sentences for people: one object, its "schema"
    /// field the version of its shape (1); what nobody knows is null.
    #[arg(long, global = true)]
    pub json: bool,
    /// Talk to the keeper on this bus instead of the system bus (tests).
    #[arg(long, global = true, env = "TACID_BUS_ADDRESS", hide = true)]
    pub bus: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The data leg: snapshots and restores of /persist, /var/log and /home.
    #[command(subcommand, after_long_help = format!("{BOUNDARIES}\n\n{SHOWN_NAMES}\n\n{JSON_OUTPUT}\n\n{}", exit_table()))]
    Data(Data),
    /// Show the keeper's alerts (health worsened, a timer's act failed) as desktop
    /// notifications, for root and the approver group: what `tacid-notify.service` (a
    /// systemd user unit) runs in a person's session.
    Notify(NotifyArgs),
    /// Journal a failed tacid unit and the health report at warning priority, and run the
    /// alert command root configured with the report on its standard input: what
    /// `tacid-alert@.service` runs (the timers' units name it in OnFailure=).
    Alert(AlertArgs),
}

#[derive(Debug, Clone, Args)]
pub struct NotifyArgs {
    /// Members of this group (and root) are notified; anybody else's notifier ends.
    #[arg(long, value_name = "GROUP", default_value = layout::defaults::APPROVER_GROUP)]
    pub group: String,
    /// The session bus to notify on, instead of DBUS_SESSION_BUS_ADDRESS's (tests).
    #[arg(long, value_name = "ADDRESS", hide = true)]
    pub session_bus: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct AlertArgs {
    /// The unit that failed (the `%i` of tacid-alert@.service).
    #[arg(long, value_name = "UNIT")]
    pub unit: String,
    /// Root's alert command: an absolute path, run with the report on its standard input;
    /// a missing file means none (the failure is journalled only).
    #[arg(long, value_name = "PATH")]
    pub command: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Data {
    /// List snapshots, newest first: what each is of, when, why, who asked, whether a
    /// staged restore names it, the targets holding a copy of it, and whether it is open
    /// for you (and where). Anybody may list.
    #[command(after_help = BOUNDARIES)]
    List,
    /// Take a snapshot of each subvolume named (default: /persist, /var/log and /home),
    /// together as one set. Root and the approver group only.
    #[command(after_help = BOUNDARIES)]
    Snapshot(SnapshotArgs),
    /// Say what restoring a snapshot, a set of snapshots together, or several snapshots named
    /// together would cost, and change nothing (exit code 3); with --yes, stage it for the
    /// next boot. Root and the approver group only may stage.
    #[command(
        after_help = BOUNDARIES,
        after_long_help = format!("{RESTORING}\n\n{BOUNDARIES}\n\n{SHOWN_NAMES}\n\n{}", exit_table())
    )]
    Restore(RestoreArgs),
    /// The staged restore, what the last boot did with one, and the keeper's health.
    Status,
    /// Is the rollback still there? How old the newest snapshot of each subvolume and its
    /// newest pre-switch set are, each copy target's newest copies, last failure and last
    /// verification, the free space against the floors and the days left at the recent
    /// rate, timer runs that failed or did not run when due, a restore waiting for a
    /// reboot, a bad request file, a snapshot held open; each line says what to do. Exit
    /// code 0 ok, 16 warning, 17 failing. Anybody may ask.
    #[command(after_long_help = format!("{}\n\n{}", health_help(), exit_table()))]
    Health(HealthArgs),
    /// Withdraw the staged restore (a set's, every member). Root and the approver group
    /// only.
    Cancel,
    /// Delete a snapshot now; the journal records who asked. Refused while the staged
    /// restore names it, it is marked to keep, or it is the last common parent with a copy
    /// target (without --next-copy-full). Root and the approver group only.
    Delete(DeleteArgs),
    /// Mark a snapshot to keep: no retention rule deletes it. --unkeep takes the mark off.
    /// Root and the approver group only.
    Keep(KeepArgs),
    /// Copy a snapshot off the disk to a target root configured (another Btrfs disk, or a
    /// backup host over SSH), incremental and verified; without NAME, what a target's timer
    /// runs: the newest snapshot of each subvolume the target lacks, then the target's
    /// retention. Root and the approver group only.
    #[command(
        after_help = BOUNDARIES,
        after_long_help = format!("{COPYING}\n\n{BOUNDARIES}\n\n{}", exit_table())
    )]
    Copy(CopyArgs),
    /// List the copies a target holds, oldest first, and which of them the local store
    /// still has. Anybody may list.
    #[command(after_long_help = format!("{COPYING}\n\n{}", exit_table()))]
    Copies(TargetArgs),
    /// Bring a copy back from a target into the local store (read-only, verified, named
    /// as tacid names it), after which `tacid data restore NAME` works as for any
    /// snapshot. Root and the approver group only.
    #[command(after_long_help = format!("{COPYING}\n\n{}", exit_table()))]
    Fetch(FetchArgs),
    /// Read back copies on a sealed target and check every part of each, down to its full
    /// copy (its digest and its authentication by this machine's key), without receiving
    /// anything; without NAME, every copy (what the target's verify timer runs). Each
    /// copy checked is journalled; `status` shows each target's last verification and
    /// `list` a copy that failed. Exit code 15 when any copy failed. Root and the approver
    /// group only.
    #[command(after_long_help = format!("{VERIFYING}\n\n{}", exit_table()))]
    Verify(VerifyArgs),
    /// Open a snapshot read-only for you and print where: your own home as it was, or
    /// (root and the approver group) the whole snapshot. Files keep yesterday's owners and
    /// modes; nothing is restored: copy what you need out of it.
    #[command(after_long_help = format!("{}\n\n{}", opening(), exit_table()))]
    Open(NameArgs),
    /// Close a snapshot you opened. Not while a program of yours still uses it (a shell
    /// sitting in it, a file open there): it then says which (exit code 13).
    #[command(after_long_help = format!("{}\n\n{}", opening(), exit_table()))]
    Close(NameArgs),
    /// What changed since a snapshot in your home (or below PATH), path by path and
    /// counted: find the file before you open anything. Changes nothing.
    #[command(after_long_help = format!("{}\n\n{SHOWN_NAMES}\n\n{}", opening(), exit_table()))]
    Diff(DiffArgs),
    /// Which snapshot holds the disk: for each snapshot (or each NAME) what deleting it frees
    /// now, what it shares with others and what is new in it since the one before; per
    /// subvolume how fast its snapshots grow; what the snapshots alone hold. Measured from
    /// the file extents, without quotas (file data on disk; metadata is not counted).
    /// Anybody may ask; the snapshots of /home one by one only root and the approver group.
    Space(SpaceArgs),
    /// Apply the retention policy: each deletion is journalled with the rule that chose it.
    /// With --dry-run (anybody may), say what would go and why, rule by rule, and delete
    /// nothing. For real: root and the approver group only.
    Prune(PruneArgs),
}

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Print metrics for node_exporter's textfile collector instead of the report.
    #[arg(long)]
    pub metrics: bool,
    /// Also write the metrics to this file, durably and at once (a temporary file, then a
    /// rename): a file in node_exporter's textfile directory, named `*.prom` (what the
    /// shipped timers and services.tacid.metrics.directory do).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<std::path::PathBuf>,
}

/// A number of seconds for people: `2 h 5 min`, `1 day`, `7 days`.
fn span(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    let mut parts = Vec::new();
    if d > 0 {
        parts.push(format!("{d} day{}", if d == 1 { "" } else { "s" }));
    }
    if h > 0 {
        parts.push(format!("{h} h"));
    }
    if m > 0 {
        parts.push(format!("{m} min"));
    }
    parts.join(" ")
}

/// Levels and thresholds, alerts, for `--help` and the man page: from `layout::defaults`.
fn health_help() -> String {
    use layout::defaults as d;
    format!(
        "\
Levels and thresholds (the defaults; NixOS: services.tacid.health.*):
  ok: nothing to do.
  warn (exit code 16), look soon: the newest snapshot older than {snap_warn} (two timeline
  periods and the timer's delay); the timeline timer's last run failed, or it has not
  run; a copy older than {copy_warn}, or the last copy to a target failed; the free
  space below the floor; fewer than {days_warn} days left at the rate the free space fell
  over the last {window}; a restore waiting for a reboot over {staged}; a bad request
  file; a snapshot open and in use for over {open}; a sealed target's copies last
  verified over {verify} ago.
  fail (exit code 17), the rollback is failing: no snapshot for {snap_fail}; no copy for
  {copy_fail}; fewer than {days_fail} day left; the free space below the hard floor
  (snapshots are refused); the stem not running; copies that failed verification.

Alerts:
  The keeper signals HealthWorsened and ScheduledActFailed on the system bus;
  `tacid notify` (the user unit tacid-notify.service) shows them as desktop
  notifications to root and the approver group; the timers' units start
  tacid-alert@.service when they fail, which journals at warning priority and runs
  root's alert command ({alert}) with this report on its standard input.

Examples:
  tacid data health
      the report; exit code 0, 16 or 17
  tacid data health --json
      the same for programs
  tacid data health --metrics-file /var/lib/prometheus-node-exporter/tacid.prom
      also write the metrics for node_exporter's textfile collector",
        snap_warn = span(d::HEALTH_SNAPSHOT_WARN_SECS),
        snap_fail = span(d::HEALTH_SNAPSHOT_FAIL_SECS),
        copy_warn = span(d::HEALTH_COPY_WARN_SECS),
        copy_fail = span(d::HEALTH_COPY_FAIL_SECS),
        verify = span(d::HEALTH_VERIFY_WARN_SECS),
        days_warn = d::HEALTH_DAYS_LEFT_WARN,
        days_fail = d::HEALTH_DAYS_LEFT_FAIL,
        window = span(d::HEALTH_GROWTH_WINDOW_SECS),
        staged = span(d::HEALTH_STAGED_WAIT_SECS),
        open = span(d::HEALTH_OPEN_HELD_SECS),
        alert = layout::ALERT_COMMAND_PATH,
    )
}

#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    /// The snapshot's name, as `tacid data list` shows it.
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct DeleteArgs {
    /// The snapshot's name, as `tacid data list` shows it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Delete it even when it is the last common parent with a copy target: the next copy
    /// to that target is then sent full (all of the subvolume, not what changed).
    #[arg(long)]
    pub next_copy_full: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SpaceArgs {
    /// Snapshot names, as `tacid data list` shows them; none: every snapshot.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The snapshot's name, as `tacid data list` shows it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Only below this path, where you see it now (e.g. /home/alice/docs); without it,
    /// your home (root and the approver group: the whole subvolume).
    #[arg(value_name = "PATH")]
    pub path: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct CopyArgs {
    /// The snapshot's name, as `tacid data list` shows it; none: the newest snapshot of
    /// each subvolume the target lacks, then the target's retention (what its timer runs).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// The target, by the name root gave it in /etc/tacid/copies.json.
    #[arg(long = "to", value_name = "TARGET")]
    pub to: String,
}

#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// The target, by the name root gave it in /etc/tacid/copies.json.
    #[arg(value_name = "TARGET")]
    pub target: String,
}

#[derive(Debug, Clone, Args)]
pub struct FetchArgs {
    /// The copy's name, as `tacid data copies TARGET` shows it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The target, by the name root gave it in /etc/tacid/copies.json.
    #[arg(long = "from", value_name = "TARGET")]
    pub from: String,
}

#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The sealed target, by the name root gave it in /etc/tacid/copies.json.
    #[arg(long = "target", value_name = "TARGET")]
    pub target: String,
    /// The copies to check, as `tacid data copies TARGET` shows them; none: every copy.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Check every copy as the target's verify timer (used by tacid-verify-TARGET.service):
    /// journalled as the rule "timer of TARGET" besides who ran it. Without it, the
    /// journal and `tacid data status` name you.
    #[arg(long, conflicts_with = "names")]
    pub timer: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeepArgs {
    /// The snapshot's name, as `tacid data list` shows it.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Take the mark off: the retention rules apply to it again.
    #[arg(long)]
    pub unkeep: bool,
}

#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Delete nothing; say what would go and which rule chose it.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    /// Subvolumes by mount point or name (/home or @home); none: the default set.
    #[arg(value_name = "SUBVOLUME")]
    pub subvolumes: Vec<String>,
    /// Why, in one line; every user of the machine can read it in `tacid data list`.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub reason: String,
    /// Mark the set as taken before a switch of configuration (used by the NixOS module).
    #[arg(long)]
    pub pre_switch: bool,
    /// Take the timeline's set (used by tacid-timeline.timer): the default set, kept by
    /// the hourly/daily/weekly/monthly counts; below the free-space floor, prune first.
    #[arg(long, conflicts_with_all = ["subvolumes", "pre_switch", "reason"])]
    pub timeline: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RestoreArgs {
    /// A snapshot's name, as `tacid data list` shows it; or a set's number (its "set"
    /// in the list), to put back every member of that set together; or several snapshots'
    /// names, at most one of each subvolume, to put all of them back together at one
    /// reboot (after a dead disk: each fetched from its own target).
    #[arg(value_name = "NAME|SET", required = true, num_args = 1..)]
    pub names: Vec<String>,
    /// Put back the whole set the snapshot NAME belongs to, every member together at one
    /// reboot, not NAME alone.
    #[arg(long)]
    pub set: bool,
    /// Of a set, put back only these members, by mount point or subvolume, separated by
    /// commas (/persist,/var/log); the others stay as they are, and the words say so.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Stage the restore after showing what it costs. Nothing is put back until the next
    /// reboot; `tacid data cancel` withdraws it until then (a set's, all of it).
    #[arg(long)]
    pub yes: bool,
    /// Also list the paths changed since the snapshot (of a set, since each member): what
    /// the restore deletes (added), puts back (modified) or brings back (removed), one per
    /// line, escaped (a backslash is \\, any other byte not shown as itself is \xHH).
    /// Root and the approver group only.
    #[arg(long)]
    pub details: bool,
}
