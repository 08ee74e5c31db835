//! `tacid notify`: a person's notifier (a systemd user unit, `tacid-notify.service`). It
//! listens on the system bus for the keeper's `HealthWorsened` and `ScheduledActFailed`
//! and shows each as a desktop notification (org.freedesktop.Notifications on the
//! person's session bus); at start it asks `Health` once, so a person who logs in learns
//! what went wrong while they were away. Only for root and the approver group: they are
//! the ones who can act; anybody else's notifier says so and ends.

use std::collections::HashMap;

use futures_util::StreamExt as _;
use keeper_interface::health::{FAIL, OK, WARN};
use keeper_interface::Keeper1Proxy;

use crate::cli::{exit, NotifyArgs};
use crate::Failure;

const NOTIFICATIONS: &str = "org.freedesktop.Notifications";
const NOTIFICATIONS_PATH: &str = "/org/freedesktop/Notifications";

/// Whether the person running this is root or in `group`.
fn may_act(group: &str) -> bool {
    if rustix::process::getuid().is_root() {
        return true;
    }
    let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
        return false;
    };
    let me = rustix::process::getgid().as_raw();
    if me == g.gid.as_raw() {
        return true;
    }
    if let Ok(groups) = rustix::process::getgroups() {
        if groups.iter().any(|x| x.as_raw() == g.gid.as_raw()) {
            return true;
        }
    }
    // The user database's list (a notifier started before the person joined the group).
    nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .ok()
        .flatten()
        .is_some_and(|u| g.mem.contains(&u.name))
}

/// One notification: (summary, body, urgency 1 normal / 2 critical).
fn notification(level: &str, says: &str) -> (String, String, u8) {
    let (summary, urgency) = match level {
        FAIL => ("tacid: the data rollback is failing", 2),
        WARN => ("tacid: the data rollback needs a look", 1),
        _ => ("tacid", 1),
    };
    (summary.to_owned(), says.to_owned(), urgency)
}

async fn show(
    session: &zbus::Connection,
    summary: &str,
    body: &str,
    urgency: u8,
) -> zbus::Result<u32> {
    // The body may be read as markup (the spec's body-markup, which dunst and GNOME have):
    // what the keeper says is text, so its `<`, `>` and `&` are escaped.
    let body = body
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let body = body.as_str();
    let mut hints: HashMap<&str, zbus::Variant<'_>> = HashMap::new();
    hints.insert("urgency", zbus::Variant::U8(urgency));
    hints.insert("desktop-entry", zbus::Variant::from("tacid"));
    let actions: Vec<&str> = Vec::new();
    // A failure stays until it is dismissed (0); a warning as the server likes (-1).
    let expire: i32 = if urgency == 2 { 0 } else { -1 };
    let reply = session
        .call_method(
            Some(NOTIFICATIONS),
            NOTIFICATIONS_PATH,
            Some(NOTIFICATIONS),
            "Notify",
            &(
                "tacid",
                0u32,
                "dialog-warning",
                summary,
                body,
                actions,
                hints,
                expire,
            ),
        )
        .await?;
    reply.body().deserialize::<u32>()
}

fn failure(message: String) -> Failure {
    Failure {
        code: exit::FAILED,
        name: String::new(),
        message,
    }
}

/// Run the notifier until the bus goes away.
pub async fn run(keeper: &Keeper1Proxy<'static>, a: &NotifyArgs) -> Result<u8, Failure> {
    if !may_act(&a.group) {
        eprintln!(
            "tacid notify: only root and the approver group ({}) are notified: they are the ones who can act; nothing to do for you",
            a.group
        );
        return Ok(exit::OK);
    }
    let session = match &a.session_bus {
        Some(address) => {
            zbus::connection::Builder::address(address.as_str())
                .build()
                .await
        }
        None => zbus::Connection::session().await,
    }
    .map_err(|e| {
        failure(format!(
            "cannot reach your session bus ({e}); tacid notify runs in a graphical session (systemctl --user start tacid-notify)"
        ))
    })?;
    let mut worsened = keeper
        .receive_health_worsened()
        .await
        .map_err(|e| failure(format!("cannot listen to the keeper: {e}")))?;
    let mut failed = keeper
        .receive_scheduled_act_failed()
        .await
        .map_err(|e| failure(format!("cannot listen to the keeper: {e}")))?;
    // What went wrong while nobody listened.
    match keeper.health().await {
        Ok(r) if r.level != OK => {
            let says = r
                .findings
                .iter()
                .filter(|f| f.level == r.level)
                .map(|f| format!("{} {}", f.says, f.todo))
                .collect::<Vec<_>>()
                .join("\n");
            let (s, b, u) = notification(&r.level, &says);
            match show(&session, &s, &b, u).await {
                Ok(id) => eprintln!("tacid notify: shown ({id}): {s}"),
                Err(e) => eprintln!("tacid notify: the notification server refused: {e}"),
            }
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("tacid notify: the keeper did not answer Health ({e}); listening anyway")
        }
    }
    eprintln!("tacid notify: listening to the keeper's alerts");
    loop {
        let (summary, body, urgency) = tokio::select! {
            s = worsened.next() => match s {
                Some(s) => match s.args() {
                    Ok(a) => notification(a.level(), a.says()),
                    Err(e) => { eprintln!("tacid notify: a signal not understood: {e}"); continue }
                },
                None => break,
            },
            s = failed.next() => match s {
                Some(s) => match s.args() {
                    Ok(a) => (
                        format!("tacid: {} failed", a.act()),
                        a.says().to_string(),
                        2u8,
                    ),
                    Err(e) => { eprintln!("tacid notify: a signal not understood: {e}"); continue }
                },
                None => break,
            },
        };
        match show(&session, &summary, &body, urgency).await {
            Ok(id) => eprintln!("tacid notify: shown ({id}): {summary}"),
            Err(e) => eprintln!("tacid notify: the notification server refused: {e}"),
        }
    }
    Err(failure(
        "the system bus went away; systemd starts tacid notify again".into(),
    ))
}
