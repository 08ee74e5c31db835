//! Btrfs send streams (v1) made by hand, command by command, as a hostile peer might make
//! them: what `btrfs receive` does with a stream a real `btrfs send` never makes.

/// Stream commands (`BTRFS_SEND_C_*`).
pub mod cmd {
    pub const SUBVOL: u16 = 1;
    pub const MKFILE: u16 = 3;
    pub const SYMLINK: u16 = 8;
    pub const WRITE: u16 = 15;
    pub const END: u16 = 21;
}

/// Stream attributes (`BTRFS_SEND_A_*`).
pub mod attr {
    pub const UUID: u16 = 1;
    pub const CTRANSID: u16 = 2;
    pub const INO: u16 = 3;
    pub const PATH: u16 = 15;
    pub const PATH_LINK: u16 = 17;
    pub const FILE_OFFSET: u16 = 18;
    pub const DATA: u16 = 19;
}

/// CRC32C (Castagnoli, reflected) with seed 0 and no final inversion: the stream's checksum.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = 0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ if crc & 1 == 1 { 0x82F6_3B78 } else { 0 };
        }
    }
    crc
}

/// One command: its number and its `(attribute, value)`s.
pub type Command = (u16, Vec<(u16, Vec<u8>)>);

/// A whole stream: the header, then each command with its checksum.
pub fn stream(commands: &[Command]) -> Vec<u8> {
    let mut out = b"btrfs-stream\0".to_vec();
    out.extend_from_slice(&1u32.to_le_bytes());
    for (command, attributes) in commands {
        let mut payload = Vec::new();
        for (kind, value) in attributes {
            payload.extend_from_slice(&kind.to_le_bytes());
            payload.extend_from_slice(&(value.len() as u16).to_le_bytes());
            payload.extend_from_slice(value);
        }
        let mut c = (payload.len() as u32).to_le_bytes().to_vec();
        c.extend_from_slice(&command.to_le_bytes());
        c.extend_from_slice(&0u32.to_le_bytes());
        c.extend_from_slice(&payload);
        let crc = crc32c(&c);
        c[6..10].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&c);
    }
    out
}

/// A stream of the subvolume `name` (received UUID `uuid`) that writes outside the directory
/// it is received in, into `victim`: `through-a-symlink` through a symlink the stream makes
/// itself, and `through-dotdot` up and out with `..`. btrfs-progs 6.2's receive, unconfined,
/// writes both and exits 0.
pub fn escaping(name: &str, uuid: [u8; 16], victim: &str) -> Vec<u8> {
    let path = |p: &str| (attr::PATH, p.as_bytes().to_vec());
    let ino = |i: u64| (attr::INO, i.to_le_bytes().to_vec());
    stream(&[
        (
            cmd::SUBVOL,
            vec![
                path(name),
                (attr::UUID, uuid.to_vec()),
                (attr::CTRANSID, 7u64.to_le_bytes().to_vec()),
            ],
        ),
        (
            cmd::SYMLINK,
            vec![
                path("esc"),
                ino(257),
                (attr::PATH_LINK, victim.as_bytes().to_vec()),
            ],
        ),
        (cmd::MKFILE, vec![path("esc/through-a-symlink"), ino(258)]),
        (
            cmd::WRITE,
            vec![
                path("esc/through-a-symlink"),
                (attr::FILE_OFFSET, 0u64.to_le_bytes().to_vec()),
                (attr::DATA, b"hostile\n".to_vec()),
            ],
        ),
        (
            cmd::MKFILE,
            vec![
                path(&format!(
                    "../../../../../../../../..{victim}/through-dotdot"
                )),
                ino(259),
            ],
        ),
        (cmd::END, vec![]),
    ])
}

/// A send stream (a header and WRITE commands of at most 60 000 bytes) of about `bytes`
/// bytes that zstd cannot shrink (xorshift from `seed`): many parts without a loop device.
pub fn incompressible(bytes: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut commands = Vec::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(60_000);
        let mut data = Vec::with_capacity(n + 8);
        while data.len() < n {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            data.extend_from_slice(&s.to_le_bytes());
        }
        data.truncate(n);
        commands.push((
            cmd::WRITE,
            vec![(attr::PATH, b"f".to_vec()), (attr::DATA, data)],
        ));
        left -= n;
    }
    stream(&commands)
}

#[cfg(test)]
mod tests {
    use crate::{LoopFs, MIN_SIZE};

    #[test]
    fn loop_btrfs_receive_takes_the_stream_as_a_real_one() {
        // The stream is a real one to `btrfs receive` (header, checksums, commands), so a
        // hostile-stream test that sees nothing escape means confinement, not a bad stream.
        let Some(fs) = LoopFs::new(MIN_SIZE).expect("make a loop Btrfs") else {
            return;
        };
        let dir = fs.top().join("in");
        std::fs::create_dir(&dir).unwrap();
        let victim = tempfile::tempdir().unwrap();
        let stream = super::escaping(
            "@home.2026-12-01T140200.123456Z",
            [9; 16],
            &victim.path().display().to_string(),
        );
        let receive = || {
            let mut child = std::process::Command::new("btrfs")
                .args(["receive", "--chroot"])
                .arg(&dir)
                .stdin(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(&stream).unwrap();
            child.wait_with_output().unwrap()
        };
        let confined = receive();
        let said = String::from_utf8_lossy(&confined.stderr).into_owned();
        assert!(!confined.status.success(), "{said}");
        assert!(
            said.contains("At subvol @home.2026-12-01T140200.123456Z"),
            "{said}"
        );
        assert!(said.contains("mkfile esc/through-a-symlink"), "{said}");
        assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 0);
    }
}
