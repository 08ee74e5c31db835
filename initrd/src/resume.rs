//! Never swap under a hibernated system.
//!
//! A hibernated kernel holds the filesystem mounted in its saved memory; changing the disk
//! before it resumes corrupts it. The units are ordered after systemd's resume attempt
//! (`systemd-hibernate-resume.service` and the older `systemd-hibernate-resume@.service` are
//! both `Before=local-fs-pre.target`; our units are `After=` it): when an image is resumed,
//! our units never run. This check covers what ordering cannot: a resume that is configured
//! but was not attempted before us (its device not there yet, or an initrd without systemd's
//! resume unit). Then the image may still be resumed by a later boot, so nothing is touched
//! now; the request waits for a normal boot (adr/0007).
//!
//! The kernel's `/sys/power/resume` holds the `major:minor` of the device a resume was
//! attempted from (systemd writes it to trigger the attempt; the kernel's own `resume=`
//! handling sets it too) and `0:0` when none was attempted.

use std::path::PathBuf;

use crate::cmdline::Cmdline;

/// systemd (255 and later) records where it hibernated in this EFI variable, and resumes from
/// it without any `resume=` on the command line.
pub const EFI_HIBERNATE_LOCATION: &str =
    "/sys/firmware/efi/efivars/HibernateLocation-8cf2644b-4b0b-428f-9387-6d876050dc67";

/// The kernel's record of a resume attempt (`major:minor`, `0:0` when none was made).
pub const SYS_POWER_RESUME: &str = "/sys/power/resume";

/// Where the facts besides the command line are read. A machine always uses
/// [`ResumeSources::default`] (the kernel's paths); only test builds of the binary
/// (`--features test-hooks`) point them at files a loop test writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeSources {
    /// Read for [`ResumeFacts::sys_power_resume`] (default [`SYS_POWER_RESUME`]).
    pub sys_power_resume: PathBuf,
    /// Whose existence is [`ResumeFacts::efi_location`] (default [`EFI_HIBERNATE_LOCATION`]).
    pub efi_hibernate_location: PathBuf,
}

impl Default for ResumeSources {
    fn default() -> ResumeSources {
        ResumeSources {
            sys_power_resume: PathBuf::from(SYS_POWER_RESUME),
            efi_hibernate_location: PathBuf::from(EFI_HIBERNATE_LOCATION),
        }
    }
}

/// What the initrd can see about hibernation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeFacts {
    /// `resume=` from the kernel command line, if any.
    pub resume_arg: Option<String>,
    /// `noresume` on the command line: the person chose to boot fresh.
    pub noresume: bool,
    /// systemd's EFI variable naming a hibernation location exists.
    pub efi_location: bool,
    /// `/sys/power/resume`, trimmed; `None` when the kernel has no hibernation support.
    pub sys_power_resume: Option<String>,
}

impl ResumeFacts {
    /// Read them from this machine.
    pub fn read(cmdline: &Cmdline) -> ResumeFacts {
        ResumeFacts::read_from(cmdline, &ResumeSources::default())
    }

    /// Read them from `cmdline` and the files `sources` names.
    pub fn read_from(cmdline: &Cmdline, sources: &ResumeSources) -> ResumeFacts {
        ResumeFacts {
            resume_arg: cmdline
                .value("resume")
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
            noresume: cmdline.has_flag("noresume"),
            efi_location: sources.efi_hibernate_location.exists(),
            sys_power_resume: std::fs::read_to_string(&sources.sys_power_resume)
                .ok()
                .map(|s| s.trim().to_owned()),
        }
    }

    /// `Some(why)` when a hibernation image may still be resumed, so the disk must not change.
    pub fn pending_resume(&self) -> Option<String> {
        if self.noresume {
            return None;
        }
        let configured = match (&self.resume_arg, self.efi_location) {
            (Some(arg), _) => format!("resume={arg} is on the kernel command line"),
            (None, true) => "systemd's HibernateLocation EFI variable is set".to_owned(),
            (None, false) => return None,
        };
        match self.sys_power_resume.as_deref() {
            // No hibernation in this kernel: nothing can be resumed.
            None => None,
            Some("0:0") => Some(format!(
                "{configured} but no resume was attempted before this unit (/sys/power/resume is 0:0)"
            )),
            Some(_) => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use super::*;

    fn facts(arg: Option<&str>, noresume: bool, efi: bool, sys: Option<&str>) -> ResumeFacts {
        ResumeFacts {
            resume_arg: arg.map(str::to_owned),
            noresume,
            efi_location: efi,
            sys_power_resume: sys.map(str::to_owned),
        }
    }

    #[test]
    fn only_an_unattempted_configured_resume_blocks() {
        // A normal machine without hibernation.
        assert_eq!(
            facts(None, false, false, Some("0:0")).pending_resume(),
            None
        );
        // Configured, and systemd tried (and found no image, or we would not run).
        assert_eq!(
            facts(Some("/dev/vda3"), false, false, Some("254:3")).pending_resume(),
            None
        );
        // Configured, not tried yet: wait.
        let why = facts(Some("/dev/vda3"), false, false, Some("0:0"))
            .pending_resume()
            .unwrap();
        assert!(why.contains("resume=/dev/vda3"), "{why}");
        assert!(facts(None, false, true, Some("0:0"))
            .pending_resume()
            .is_some());
        // The person said noresume; a kernel without hibernation cannot resume.
        assert_eq!(
            facts(Some("/dev/vda3"), true, true, Some("0:0")).pending_resume(),
            None
        );
        assert_eq!(
            facts(Some("/dev/vda3"), false, false, None).pending_resume(),
            None
        );
        let cmd = Cmdline::parse("root=/dev/vda2 resume= quiet");
        assert_eq!(ResumeFacts::read(&cmd).resume_arg, None);
    }

    #[test]
    fn facts_are_read_from_the_named_files() {
        let dir = tempfile::tempdir().unwrap();
        let sources = ResumeSources {
            sys_power_resume: dir.path().join("resume"),
            efi_hibernate_location: dir.path().join("HibernateLocation"),
        };
        let cmd = Cmdline::parse("root=/dev/vda2 resume=/dev/vda3");
        // Neither file: a kernel without hibernation, no EFI variable.
        let f = ResumeFacts::read_from(&cmd, &sources);
        assert_eq!(f, facts(Some("/dev/vda3"), false, false, None));
        std::fs::write(&sources.sys_power_resume, "0:0\n").unwrap();
        std::fs::write(&sources.efi_hibernate_location, b"\x07\0\0\0{}").unwrap();
        let f = ResumeFacts::read_from(&cmd, &sources);
        assert_eq!(f, facts(Some("/dev/vda3"), false, true, Some("0:0")));
        assert!(f.pending_resume().is_some());
        assert_eq!(
            ResumeSources::default().sys_power_resume,
            std::path::Path::new("/sys/power/resume")
        );
    }
}
