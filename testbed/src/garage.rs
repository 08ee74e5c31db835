//! Test-only: a real Garage (S3-compatible object store) on 127.0.0.1, one node, sqlite
//! metadata, in a temporary directory; killed and removed on drop.
//!
//! ```no_run
//! let Some(garage) = testbed::garage::Garage::start().unwrap() else { return };
//! // garage.endpoint() is http://127.0.0.1:PORT; garage.bucket(), key_id(), secret().
//! ```
//!
//! The binary is `$TACID_GARAGE` (scripts/test sets it: `source scripts/deps.sh;
//! ensure_garage` builds it once into a cache), else `garage` in PATH. Without one,
//! [`Garage::start`] prints a loud `SKIPPED` line and returns `Ok(None)`; with `CI=true` it
//! panics instead.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The region Garage answers for (copies.json's default for a sealed S3 target).
pub const REGION: &str = "garage";

/// A running single-node Garage with one bucket and one key allowed on it.
#[derive(Debug)]
pub struct Garage {
    // Removed last, after the server is killed.
    dir: tempfile::TempDir,
    binary: PathBuf,
    server: Option<Child>,
    s3_port: u16,
    bucket: String,
    key_id: String,
    secret: String,
}

impl Garage {
    /// Start one, lay out its node (1 GB in zone dc1), make the bucket `tacid-test` and a
    /// key with read and write on it. `Ok(None)` when there is no Garage binary (said loudly).
    pub fn start() -> io::Result<Option<Garage>> {
        let Some(binary) = find_binary() else {
            let why = "no Garage binary: set TACID_GARAGE (scripts/test does: \
                       `source scripts/deps.sh; ensure_garage` builds it into a cache) \
                       or put `garage` in PATH";
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("testbed::garage: CI=true but {why}");
            }
            eprintln!("\n*** SKIPPED: {why}; this Garage (S3) test did not run ***\n");
            return Ok(None);
        };
        // The ports are picked free but taken only when Garage binds them: another process
        // may take one in between. Then Garage exits, and a new pick is tried.
        let mut last = None;
        for _ in 0..3 {
            match Self::start_with(&binary) {
                Ok(garage) => return Ok(Some(garage)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("testbed::garage: not started")))
    }

    fn start_with(binary: &Path) -> io::Result<Garage> {
        let binary = binary.to_owned();
        let dir = tempfile::Builder::new()
            .prefix("tacid-testbed-garage-")
            .tempdir()?;
        let rpc_port = free_port()?;
        let s3_port = free_port()?;
        let secret = random_hex();
        let config = format!(
            "metadata_dir = \"{meta}\"\n\
             data_dir = \"{data}\"\n\
             db_engine = \"sqlite\"\n\
             replication_factor = 1\n\
             rpc_bind_addr = \"127.0.0.1:{rpc_port}\"\n\
             rpc_public_addr = \"127.0.0.1:{rpc_port}\"\n\
             rpc_secret = \"{secret}\"\n\
             [s3_api]\n\
             s3_region = \"{REGION}\"\n\
             api_bind_addr = \"127.0.0.1:{s3_port}\"\n\
             root_domain = \".s3.garage.localhost\"\n",
            meta = dir.path().join("meta").display(),
            data = dir.path().join("data").display(),
        );
        fs::write(dir.path().join("garage.toml"), config)?;
        let log = fs::File::create(dir.path().join("garage.log"))?;
        let server = Command::new(&binary)
            .arg("-c")
            .arg(dir.path().join("garage.toml"))
            .arg("server")
            .env("RUST_LOG", "garage=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut garage = Garage {
            dir,
            binary,
            server: Some(server),
            s3_port,
            bucket: "tacid-test".into(),
            key_id: String::new(),
            secret: String::new(),
        };
        // From here on Drop kills the server whatever fails.
        let start = Instant::now();
        // `node id` reads the key from disk; `status` needs the server's RPC answering.
        let node = loop {
            if let Some(status) = garage
                .server
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(io::Error::other(format!(
                    "testbed::garage: the server exited ({status}); its log:\n{}",
                    garage.log()
                )));
            }
            match garage
                .cli(&["status"])
                .and_then(|_| garage.cli(&["node", "id", "-q"]))
            {
                Ok(out) if out.contains('@') => break out.trim().to_owned(),
                _ if start.elapsed() > Duration::from_secs(30) => {
                    return Err(io::Error::other(format!(
                        "testbed::garage: the server did not answer within 30 s; its log:\n{}",
                        garage.log()
                    )))
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let node = node.split('@').next().unwrap_or_default().to_owned();
        garage.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &node])?;
        garage.cli(&["layout", "apply", "--version", "1"])?;
        let bucket = garage.bucket.clone();
        // The layout takes effect asynchronously: retry the first table write.
        let start = Instant::now();
        loop {
            match garage.cli(&["bucket", "create", &bucket]) {
                Ok(_) => break,
                Err(e) if start.elapsed() > Duration::from_secs(30) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        let key = garage.cli(&["key", "create", "tacid-test-key"])?;
        let field = |name: &str| {
            key.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .ok_or_else(|| {
                    io::Error::other(format!(
                        "testbed::garage: no {name:?} in `key create`: {key}"
                    ))
                })
        };
        garage.key_id = field("Key ID:")?;
        garage.secret = field("Secret key:")?;
        garage.cli(&[
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            &bucket,
            "--key",
            "tacid-test-key",
        ])?;
        Ok(garage)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    pub fn host(&self) -> &str {
        "127.0.0.1"
    }

    pub fn port(&self) -> u16 {
        self.s3_port
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `[REGION]`.
    pub fn region(&self) -> &str {
        REGION
    }

    /// Where its data blocks are (a test that damages the store directly).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("garage.log")).unwrap_or_default()
    }

    /// Run the `garage` command line on this server; its stdout.
    pub fn cli(&self, args: &[&str]) -> io::Result<String> {
        let out = Command::new(&self.binary)
            .arg("-c")
            .arg(self.dir.path().join("garage.toml"))
            .args(args)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "testbed::garage: garage {args:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn find_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TACID_GARAGE").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("garage"))
            .find(|p| Path::is_file(p))
    })
}

/// A port nobody listens on now (the kernel's pick; free again once the probe closes).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// 32 random bytes in hex (Garage's rpc_secret).
fn random_hex() -> String {
    use io::Read as _;
    let mut bytes = [0u8; 32];
    if let Ok(mut f) = fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
