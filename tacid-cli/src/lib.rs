//! `tacid`: the person's way in. It talks only to the keeper (`org.tacid.Keeper1`), prints
//! sentences for people or JSON for programs, and exits with one code per class of outcome.

pub mod alert;
pub mod cli;
pub mod docs;
pub mod health;
pub mod json;
pub mod notify;
mod render;
mod rows;
pub mod space;

/// Where a `tacid` process spends its time after `main` begins, said on stderr when
/// `TACID_TIMINGS` is set (the end-to-end bench reads it). Nothing otherwise.
pub mod timings {
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;

    static STARTED: OnceLock<Option<Instant>> = OnceLock::new();
    static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());

    /// `main` began at `at`; marks are kept only when `TACID_TIMINGS` is set.
    pub fn start(at: Instant) {
        let _ = STARTED.set(std::env::var_os("TACID_TIMINGS").map(|_| at));
    }

    /// The phase `what` ends now.
    pub fn mark(what: &'static str) {
        if let Some(Some(_)) = STARTED.get() {
            MARKS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((what, Instant::now()));
        }
    }

    /// One line on stderr: each phase's microseconds, and the total since `main` began.
    pub fn report() {
        let Some(Some(started)) = STARTED.get() else {
            return;
        };
        let marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
        let mut line = String::from("tacid timings (us):");
        let mut last = *started;
        for (what, at) in marks.iter() {
            line.push_str(&format!(" {what}={}", at.duration_since(last).as_micros()));
            last = *at;
        }
        line.push_str(&format!(" since_main={}", started.elapsed().as_micros()));
        eprintln!("{line}");
    }
}

use std::process::ExitCode;
use std::time::SystemTime;

use keeper_interface::{Error as KeeperError, Keeper1Proxy};
use zbus::Connection;

use crate::cli::{exit, Cli, Command, Data};

/// Await a call to the keeper; when it takes more than a second (counting what changed
/// since a snapshot of a large subvolume can), say so on stderr so the wait is explained.
async fn slow_with_a_word<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::pin!(call);
    tokio::select! {
        done = &mut call => done,
        () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
            eprintln!("tacid: counting what changed since the snapshot (from Btrfs metadata; stops with \"at least\" after a few seconds)...");
            call.await
        }
    }
}

/// How often a progress line is written when stderr is not a terminal (a timer's unit, a
/// pipe): often enough that a journal shows a long copy moving, rarely enough not to flood.
const PLAIN_PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Await a copy or fetch, asking the keeper for its progress once a second on the same
/// connection and saying it on stderr: rewritten in place on a terminal, else a plain
/// line every [`PLAIN_PROGRESS_EVERY`]. `name` empty: any copy to `target` (the timer's).
async fn with_progress<T>(
    keeper: &Keeper1Proxy<'static>,
    target: &str,
    name: &str,
    call: impl std::future::Future<Output = T>,
) -> T {
    use std::io::IsTerminal as _;
    let terminal = std::io::stderr().is_terminal();
    tokio::pin!(call);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_plain: Option<std::time::Instant> = None;
    let mut shown = false;
    let done = loop {
        tokio::select! {
            done = &mut call => break done,
            _ = tick.tick() => {
                let Ok(all) = keeper.copy_progress().await else { continue };
                let Some(f) = all
                    .iter()
                    .find(|f| f.target == target && (name.is_empty() || f.name == name))
                else {
                    continue;
                };
                let line = render::progress(f);
                if terminal {
                    // \r and erase to the end of the line: one line, rewritten.
                    eprint!("\r{line}\x1b[K");
                    shown = true;
                } else if last_plain.is_none_or(|t| t.elapsed() >= PLAIN_PROGRESS_EVERY) {
                    eprintln!("{line}");
                    last_plain = Some(std::time::Instant::now());
                }
            }
        }
    };
    if shown {
        eprint!("\r\x1b[K");
    }
    done
}

/// The processes holding the tree at `path` that this user may see, in words.
fn holders_list(path: &std::path::Path) -> String {
    let holders = holders_of(path);
    if holders.is_empty() {
        "no process you may look into holds it".into()
    } else {
        format!("held by {}", holders.join(", "))
    }
}

/// What holds the tree mounted at `path`, among the processes this user may look into:
/// each whose working directory, root, open files or mappings are on its device.
fn holders_note(path: &std::path::Path) -> String {
    let holders = holders_of(path);
    if holders.is_empty() {
        format!(
            ". No process of yours holds {}; one of root's may",
            path.display()
        )
    } else {
        format!(". Held by: {}", holders.join(", "))
    }
}

/// "PID (command)" of every process (this one excepted) with its working directory, root,
/// an open file or a mapping on the device of `path`, among those /proc lets us look into.
pub fn holders_of(path: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(dev) = std::fs::metadata(path).map(|m| m.dev()) else {
        return Vec::new();
    };
    // What the kernel already knows, never asking the filesystem: a process of a hostile
    // user's can sit in a FUSE filesystem whose server does not answer, and a plain stat
    // through /proc/PID/cwd would wait for it for ever.
    let on_dev = |p: &std::path::Path| {
        rustix::fs::statx(
            rustix::fs::CWD,
            p,
            rustix::fs::AtFlags::STATX_DONT_SYNC,
            rustix::fs::StatxFlags::empty(),
        )
        .is_ok_and(|x| rustix::fs::makedev(x.stx_dev_major, x.stx_dev_minor) == dev)
    };
    // /proc/PID/maps writes the device as hex "major:minor".
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let mapped = format!(" {major:02x}:{minor:02x} ");
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut held: Vec<(u32, String)> = procs
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let dir = e.path();
            let holds = on_dev(&dir.join("cwd"))
                || on_dev(&dir.join("root"))
                || std::fs::read_dir(dir.join("fd"))
                    .is_ok_and(|fds| fds.filter_map(Result::ok).any(|fd| on_dev(&fd.path())))
                || std::fs::read_to_string(dir.join("maps"))
                    .is_ok_and(|m| m.lines().any(|l| l.contains(&mapped)));
            if !holds {
                return None;
            }
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            Some((pid, comm.trim().to_owned()))
        })
        .collect();
    held.sort();
    held.iter()
        .map(|(pid, comm)| format!("PID {pid} ({})", layout::escape::escape(comm.as_bytes())))
        .collect()
}

/// A failure, with the code to exit with and what to tell the person.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    /// The D-Bus error name, when the keeper gave one.
    pub name: String,
    pub message: String,
}

fn classify(e: KeeperError) -> Failure {
    let message = e.message();
    // A named error of the keeper: its exit code by its kind (every kind, no default);
    // its name is the kind's.
    if let Some(kind) = e.kind() {
        use keeper_interface::ErrorKind as K;
        let code = match kind {
            K::NotAuthorized => exit::NOT_AUTHORIZED,
            K::StemNotRunning => exit::STEM_NOT_RUNNING,
            K::NoSuchSnapshot | K::InvalidArgument | K::NoSuchTarget => exit::NOT_FOUND,
            K::NotAllowedForSubvolume
            | K::AnotherRestoreStaged
            | K::WordsNotShown
            | K::TargetBusy
            | K::AlreadyHere
            | K::OpenRefused => exit::REFUSED,
            K::StemFailed | K::Journal => exit::KEEPER_FAILED,
            K::Protected => exit::PROTECTED,
            K::NoSpace => exit::NO_SPACE,
            K::InUse => exit::IN_USE,
            K::CopierNotRunning | K::CopierFailed => exit::COPIER,
            K::Untrusted => exit::UNTRUSTED,
            K::TargetUnreachable
            | K::HostKeyChanged
            | K::TargetNotBtrfs
            | K::TargetFull
            | K::TransferFailed => exit::TARGET_FAILED,
        };
        return Failure {
            code,
            name: kind.name().to_owned(),
            message,
        };
    }
    // Only a bus error has no kind.
    let KeeperError::ZBus(e) = &e else {
        return Failure {
            code: exit::FAILED,
            name: String::new(),
            message,
        };
    };
    let (code, name) = match bus_peer::peer_gone(e) {
        Some(bus_peer::PeerGone::NotThere) => {
            let name = match e {
                zbus::Error::MethodError(n, _, _) => n.as_str().to_owned(),
                _ => "ServiceUnknown".into(),
            };
            return Failure {
                code: exit::KEEPER_UNREACHABLE,
                name,
                message: "the keeper is not running; start tacid-keeper.service \
                              (`systemctl start tacid-keeper.service`) and try again"
                    .into(),
            };
        }
        Some(bus_peer::PeerGone::WentAway) => {
            return keeper_went_away(match e {
                zbus::Error::MethodError(n, _, _) => n.as_str(),
                _ => "NoReply",
            });
        }
        None => match e {
            zbus::Error::MethodError(n, m, _) => {
                let n = n.as_str();
                if n == "org.freedesktop.DBus.Error.AccessDenied" {
                    return Failure {
                        code: exit::NOT_AUTHORIZED,
                        name: n.to_owned(),
                        message: format!(
                            "the bus refused the call: {}",
                            m.clone().unwrap_or_default()
                        ),
                    };
                }
                return Failure {
                    code: exit::FAILED,
                    name: n.to_owned(),
                    message: m.clone().unwrap_or_default(),
                };
            }
            zbus::Error::FDO(fdo) => match **fdo {
                zbus::fdo::Error::AccessDenied(ref m) => {
                    return Failure {
                        code: exit::NOT_AUTHORIZED,
                        name: "AccessDenied".into(),
                        message: format!("the bus refused the call: {m}"),
                    }
                }
                _ => (exit::FAILED, ""),
            },
            _ => (exit::KEEPER_UNREACHABLE, ""),
        },
    };
    Failure {
        code,
        name: name.to_owned(),
        message,
    }
}

/// The keeper stopped while a call waited for its answer (a long copy or fetch most often).
fn keeper_went_away(name: &str) -> Failure {
    Failure {
        code: exit::KEEPER_UNREACHABLE,
        name: name.to_owned(),
        message: "the keeper stopped while answering (it was restarted, or it crashed); what \
                  was asked may still have been done: `tacid data list` and `tacid data copies \
                  TARGET` say what is there. Start tacid-keeper.service if it is not running"
            .into(),
    }
}

async fn connect(bus: Option<&str>) -> Result<Keeper1Proxy<'static>, Failure> {
    let unreachable = |what: String| Failure {
        code: exit::KEEPER_UNREACHABLE,
        name: String::new(),
        message: format!("{what}; is D-Bus running? (the keeper is reached over the system bus)"),
    };
    let conn = match bus {
        Some(address) => zbus::connection::Builder::address(address).build().await,
        None => Connection::system().await,
    }
    .map_err(|e| unreachable(format!("cannot connect to the bus: {e}")))?;
    timings::mark("connect");
    let proxy = Keeper1Proxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|e| unreachable(format!("cannot reach the keeper: {e}")));
    timings::mark("proxy");
    proxy
}

/// Run the command; what to print has been printed. Returns the exit code.
pub fn run(cli: Cli) -> ExitCode {
    let as_json = cli.json;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tacid: cannot start: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    timings::mark("runtime");
    let done = runtime.block_on(act(cli));
    timings::mark("render");
    timings::report();
    match done {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if as_json {
                match serde_json::to_string(&json::document(json::Failure::from(&f))) {
                    Ok(v) => println!("{v}"),
                    Err(e) => eprintln!("tacid: cannot render JSON: {e}"),
                }
            }
            eprintln!("tacid: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// A set's number, as `tacid data list` shows it (a snapshot's name never is one).
fn is_set_number(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

/// Why several names given to `restore` are not a command: a set's number among them, or
/// --set or --only with them (each chooses members of one set).
fn several_misnamed(a: &cli::RestoreArgs) -> Option<String> {
    if a.names.len() < 2 {
        return None;
    }
    if let Some(n) = a.names.iter().find(|n| is_set_number(n)) {
        return Some(format!(
            "{n} is a set's number: name a set alone (`tacid data restore {n}`), or several \
             snapshots by their names to put them back together"
        ));
    }
    (a.set || !a.only.is_empty()).then(|| {
        "--set and --only choose members of one set; several snapshots named are put back \
         as named: leave --set and --only out"
            .to_owned()
    })
}

/// `tacid data restore SET` (or `NAME --set`, or `NAME NAME...`): every member's cost and
/// the total; with `--yes`, one request for every member put back, under one consent.
async fn restore_set(
    keeper: &Keeper1Proxy<'static>,
    a: cli::RestoreArgs,
    as_json: bool,
) -> Result<u8, Failure> {
    // Several snapshots named are put back together as they are; one name with --set, or
    // a number, is a set.
    let named = a.names.len() > 1;
    let preview = if named {
        slow_with_a_word(keeper.named_restore_preview(a.names.clone())).await
    } else {
        slow_with_a_word(keeper.set_restore_preview(&a.names[0], a.only.clone())).await
    }
    .map_err(classify)?;
    let details = if a.details {
        let mut all = Vec::new();
        for m in preview.members.iter().filter(|m| m.put_back) {
            all.push(
                slow_with_a_word(keeper.restore_details(&m.snapshot))
                    .await
                    .map_err(classify)?,
            );
        }
        Some(all)
    } else {
        None
    };
    if !a.yes {
        if as_json {
            let shown = json::SetRestorePreview::from(&preview);
            match &details {
                Some(d) => print_json(json::Shown {
                    shown,
                    details: Some(d.iter().map(json::RestoreDetails::from).collect::<Vec<_>>()),
                    staged: None,
                }),
                None => print_json(shown),
            }
        } else {
            print!("{}", render::set_preview(&preview));
            if let Some(d) = &details {
                print!("{}", render::set_details(d));
            }
        }
        return Ok(exit::PREVIEW_ONLY);
    }
    if let (Some(d), false) = (&details, as_json) {
        print!("{}", render::set_details(d));
    }
    let staged = if named {
        keeper
            .named_restore_confirm(a.names.clone(), &preview.words)
            .await
    } else {
        keeper
            .set_restore_confirm(&a.names[0], a.only.clone(), &preview.words)
            .await
    }
    .map_err(classify)?;
    if as_json {
        print_json(json::Shown {
            shown: json::SetRestorePreview::from(&preview),
            details: None,
            staged: Some(json::SetRestoreStaged::from(&staged)),
        });
    } else {
        print!("{}", render::set_staged(&preview, &staged));
    }
    Ok(exit::OK)
}

/// `tacid data list`: the keeper's flat `ListRows`, read in place from its reply and written
/// into one buffered stdout. A reader that goes away (`| head`) ends the writing quietly.
async fn list_rows(
    keeper: &Keeper1Proxy<'static>,
    as_json: bool,
    now: SystemTime,
) -> Result<(), Failure> {
    use std::io::Write as _;
    let reply = keeper.list_rows().await.map_err(classify)?;
    let (rows, copies) = reply.rows().map_err(classify)?;
    timings::mark("call");
    // Which of them are open for the caller: a list without it is still a list (a keeper or
    // stem that cannot open says so at `tacid data open`).
    let opens = keeper.opens().await.unwrap_or_default();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let written = if as_json {
        json::write_list(&mut out, &rows, &copies, &opens)
    } else {
        render::write_list(&mut out, &rows, &copies, &opens, now)
    };
    let _ = written.and_then(|()| out.flush());
    Ok(())
}

/// `body` as one JSON document (`json::document`), pretty, on stdout.
fn print_json<T: serde::Serialize>(body: T) {
    match serde_json::to_string_pretty(&json::document(body)) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("tacid: cannot render JSON: {e}"),
    }
}

async fn act(cli: Cli) -> Result<u8, Failure> {
    let as_json = cli.json;
    let data = match cli.command {
        Command::Data(data) => data,
        Command::Notify(a) => {
            let keeper = connect(cli.bus.as_deref()).await?;
            return notify::run(&keeper, &a).await;
        }
        Command::Alert(a) => {
            let keeper = connect(cli.bus.as_deref()).await?;
            return alert::run(&keeper, &a).await;
        }
    };
    if let Data::Restore(a) = &data {
        if let Some(message) = several_misnamed(a) {
            return Err(Failure {
                code: exit::USAGE,
                name: String::new(),
                message,
            });
        }
        if !a.only.is_empty() && !a.set && !is_set_number(&a.names[0]) {
            return Err(Failure {
                code: exit::USAGE,
                name: String::new(),
                message: "--only chooses members of a set: name the set by its number \
                          (`tacid data list` shows each snapshot's set), or add --set to put \
                          back the set NAME belongs to"
                    .into(),
            });
        }
    }
    let keeper = connect(cli.bus.as_deref()).await?;
    let now = SystemTime::now();
    match data {
        Data::List => {
            list_rows(&keeper, as_json, now).await?;
            Ok(exit::OK)
        }
        Data::Open(a) => {
            let opened = keeper.open(&a.name).await.map_err(classify)?;
            if as_json {
                print_json(json::Opened::from(&opened));
            } else {
                print!("{}", render::opened(&opened, now));
            }
            Ok(exit::OK)
        }
        Data::Close(a) => {
            let closed = match keeper.close(&a.name).await {
                Ok(c) => c,
                Err(e @ KeeperError::InUse(_)) => {
                    // The stem cannot see whose processes they are; the person can see their
                    // own, which are the ones that can enter their open.
                    let opens = keeper.opens().await.unwrap_or_default();
                    let mut f = classify(e);
                    if let Some(o) = opens.iter().find(|o| o.snapshot == a.name) {
                        f.message
                            .push_str(&holders_note(std::path::Path::new(&o.path)));
                    }
                    return Err(f);
                }
                Err(e) => return Err(classify(e)),
            };
            if as_json {
                print_json(json::ClosedOpen::from(&closed));
            } else {
                println!("{}", closed.message);
            }
            Ok(exit::OK)
        }
        Data::Diff(a) => {
            use std::os::unix::ffi::OsStrExt as _;
            let path = a
                .path
                .as_ref()
                .map(|p| p.as_os_str().as_bytes().to_vec())
                .unwrap_or_default();
            let changes = slow_with_a_word(keeper.diff(&a.name, &path))
                .await
                .map_err(classify)?;
            if as_json {
                print_json(json::PartChanges::from(&changes));
            } else {
                print!("{}", render::part_changes(&changes));
            }
            Ok(exit::OK)
        }
        Data::Snapshot(a) => {
            let set = if a.timeline {
                keeper.snapshot_timeline().await
            } else {
                keeper.snapshot(a.subvolumes, &a.reason, a.pre_switch).await
            }
            .map_err(classify)?;
            timings::mark("call");
            if as_json {
                print_json(json::SnapshotSet::from(&set));
            } else {
                print!("{}", render::snapshot_set(&set));
            }
            Ok(exit::OK)
        }
        Data::Restore(a) if a.set || a.names.len() > 1 || is_set_number(&a.names[0]) => {
            restore_set(&keeper, a, as_json).await
        }
        Data::Restore(mut a) => {
            let name = a.names.swap_remove(0);
            let preview = slow_with_a_word(keeper.restore_preview(&name))
                .await
                .map_err(classify)?;
            timings::mark("call");
            let details = if a.details {
                Some(
                    slow_with_a_word(keeper.restore_details(&name))
                        .await
                        .map_err(classify)?,
                )
            } else {
                None
            };
            if !a.yes {
                if as_json {
                    let shown = json::RestorePreview::from(&preview);
                    match &details {
                        Some(d) => print_json(json::Shown {
                            shown,
                            details: Some(json::RestoreDetails::from(d)),
                            staged: None,
                        }),
                        None => print_json(shown),
                    }
                } else {
                    print!("{}", render::preview(&preview));
                    if let Some(d) = &details {
                        print!("{}", render::details(d));
                    }
                }
                return Ok(exit::PREVIEW_ONLY);
            }
            if let (Some(d), false) = (&details, as_json) {
                print!("{}", render::details(d));
            }
            let staged = keeper
                .restore_confirm(&name, &preview.words)
                .await
                .map_err(classify)?;
            if as_json {
                print_json(json::Shown {
                    shown: json::RestorePreview::from(&preview),
                    details: None,
                    staged: Some(json::RestoreStaged::from(&staged)),
                });
            } else {
                print!("{}", render::staged(&preview, &staged));
            }
            Ok(exit::OK)
        }
        Data::Status => {
            let status = keeper.status().await.map_err(classify)?;
            if as_json {
                print_json(json::Status::from(&status));
            } else {
                print!("{}", render::status(&status, now));
            }
            Ok(exit::OK)
        }
        Data::Health(a) => {
            let report = keeper.health().await.map_err(classify)?;
            if let Some(path) = &a.metrics_file {
                keeper_interface::metrics::write_file(path, &keeper_interface::metrics::metrics(&report)).map_err(|e| Failure {
                    code: exit::FAILED,
                    name: String::new(),
                    message: format!(
                        "cannot write the metrics to {} ({e}); is the directory there and writable?",
                        path.display()
                    ),
                })?;
            }
            if a.metrics {
                print!("{}", keeper_interface::metrics::metrics(&report));
            } else if as_json {
                print_json(health::Json::from(&report));
            } else {
                print!("{}", health::text(&report));
            }
            Ok(health::exit_code(&report))
        }
        Data::Cancel => {
            let c = keeper.cancel().await.map_err(classify)?;
            if as_json {
                print_json(json::Cancelled::from(&c));
            } else {
                println!("{}", c.message);
            }
            Ok(exit::OK)
        }
        Data::Delete(a) => {
            let asked = if a.next_copy_full {
                keeper.delete_next_copy_full(&a.name).await
            } else {
                keeper.delete(&a.name).await
            };
            let d = match asked {
                Ok(d) => d,
                Err(e @ KeeperError::InUse(_)) => {
                    // The refusal says where the snapshot is open; whoever may enter there
                    // (its owner, root) can be told which processes hold it.
                    let mut f = classify(e);
                    let held: String = f
                        .message
                        .split_whitespace()
                        .map(|w| w.trim_end_matches(['.', ',']))
                        .filter(|w| w.starts_with('/'))
                        .map(std::path::Path::new)
                        .filter(|p| p.is_dir())
                        .map(|p| format!(". At {}: {}", p.display(), holders_list(p)))
                        .collect();
                    f.message.push_str(&held);
                    return Err(f);
                }
                Err(e) => return Err(classify(e)),
            };
            timings::mark("call");
            if as_json {
                print_json(json::Deleted::from(&d));
            } else {
                println!("{}", d.message);
            }
            Ok(exit::OK)
        }
        Data::Keep(a) => {
            let k = keeper.keep(&a.name, !a.unkeep).await.map_err(classify)?;
            if as_json {
                print_json(json::KeepMarked::from(&k));
            } else {
                println!("{}", k.message);
            }
            Ok(exit::OK)
        }
        Data::Copy(a) => {
            let name = a.name.clone().unwrap_or_default();
            let report = with_progress(&keeper, &a.to, &name, keeper.copy(&name, &a.to))
                .await
                .map_err(classify)?;
            if as_json {
                print_json(json::CopyReport::from(&report));
            } else {
                print!("{}", render::copy_report(&report));
            }
            Ok(if report.failed.is_empty() {
                exit::OK
            } else {
                exit::TARGET_FAILED
            })
        }
        Data::Copies(a) => {
            let held = keeper.copies(&a.target).await.map_err(classify)?;
            if as_json {
                print_json(json::TargetCopies::from(&held));
            } else {
                print!("{}", render::target_copies(&held, now));
            }
            Ok(exit::OK)
        }
        Data::Fetch(a) => {
            let fetched = with_progress(&keeper, &a.from, &a.name, keeper.fetch(&a.name, &a.from))
                .await
                .map_err(classify)?;
            if as_json {
                print_json(json::Fetched::from(&fetched));
            } else {
                println!("{}", fetched.message);
            }
            Ok(exit::OK)
        }
        Data::Verify(a) => {
            let report = if a.timer {
                with_progress(&keeper, &a.target, "", keeper.verify_timer(&a.target)).await
            } else {
                with_progress(
                    &keeper,
                    &a.target,
                    "",
                    keeper.verify(&a.target, a.names.clone()),
                )
                .await
            }
            .map_err(classify)?;
            if as_json {
                print_json(json::VerifyReport::from(&report));
            } else {
                print!("{}", render::verified(&report));
            }
            Ok(if report.copies.iter().all(|c| c.ok) {
                exit::OK
            } else {
                exit::UNTRUSTED
            })
        }
        Data::Space(a) => {
            let report = keeper.space(a.names.clone()).await.map_err(classify)?;
            if as_json {
                print_json(space::Json::from(&report));
            } else {
                print!("{}", space::text(&report));
            }
            Ok(exit::OK)
        }
        Data::Prune(a) => {
            let report = keeper.prune(a.dry_run).await.map_err(classify)?;
            if as_json {
                print_json(json::PruneReport::from(&report));
            } else {
                print!("{}", render::prune(&report, now));
            }
            Ok(if report.failed.is_empty() {
                exit::OK
            } else {
                exit::FAILED
            })
        }
    }
}
