//! A MariaDB server of the test's own (`mariadb-install-db` and `mariadbd` from the `PATH`, or
//! from `SANGHO_TEST_MARIADB_BIN`), on a free loopback port, with its own socket, pid file and
//! data directory in a temporary directory, for the tests that crash or reconfigure a server:
//! never the shared one. `root` has no password. InnoDB is kept small so that it starts in a
//! few seconds (16 MiB buffer pool, 8 MiB redo log), and durable: every commit is flushed to
//! the redo log before it answers (`innodb_flush_log_at_trx_commit = 1`, unless the test's own
//! options say otherwise). Killed (SIGKILL) and deleted when dropped.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{free_port, is_root};

/// A private MariaDB server.
pub struct PrivateMariaDb {
    bin: Option<PathBuf>,
    dir: tempfile::TempDir,
    port: u16,
    options: Vec<String>,
    server: Mutex<Option<Child>>,
}

impl PrivateMariaDb {
    /// Creates a data directory (with a `test` database) and starts a server on it with
    /// `options` besides the defaults (`--name=value`, e.g.
    /// `--innodb-flush-log-at-trx-commit=2`; a later option wins over a default).
    pub fn start(options: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("sangho-mariadb-")
            .tempdir()
            .expect("a temporary directory");
        let server = Self {
            bin: std::env::var_os("SANGHO_TEST_MARIADB_BIN").map(PathBuf::from),
            dir,
            port: free_port(),
            options: options.iter().map(|option| (*option).to_owned()).collect(),
            server: Mutex::new(None),
        };
        let mut install = server.command("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", server.data().display()))
            .arg("--auth-root-authentication-method=normal")
            .args(server.user())
            .args(Self::SMALL_INNODB);
        let output = install
            .output()
            .unwrap_or_else(|error| panic!("run mariadb-install-db: {error}"));
        assert!(
            output.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        server.start_again();
        server
    }

    /// The InnoDB settings of both the installation and the server: small files, quick to
    /// create and to recover.
    const SMALL_INNODB: [&str; 2] = ["--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M"];

    fn command(&self, tool: &str) -> Command {
        match &self.bin {
            Some(bin) => Command::new(bin.join(tool)),
            None => Command::new(tool),
        }
    }

    /// `--user=root` when the tests run as root (`mariadbd` refuses root otherwise).
    fn user(&self) -> Option<&'static str> {
        is_root().then_some("--user=root")
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's error log.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts `mariadbd` (again, on the same data directory: after [`crash`](Self::crash)
    /// InnoDB recovers from its redo log), and waits until it accepts connections (at most
    /// 60 s).
    pub fn start_again(&self) {
        let mut server = self.server.lock().unwrap();
        assert!(server.is_none(), "the private MariaDB runs already");
        let dir = self.dir.path();
        let mut command = self.command("mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.data().display()))
            .arg(format!("--socket={}", dir.join("mariadb.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mariadb.pid").display()))
            .arg(format!("--log-error={}", self.log().display()))
            .args(["--bind-address=127.0.0.1", &format!("--port={}", self.port)])
            .args(["--skip-name-resolve", "--max-connections=300"])
            .args(self.user())
            .args(Self::SMALL_INNODB)
            .arg("--innodb-flush-log-at-trx-commit=1")
            .args(&self.options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command
            .spawn()
            .unwrap_or_else(|error| panic!("start mariadbd: {error}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "mariadbd ended at its start ({status}): {}",
                    std::fs::read_to_string(self.log()).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the private MariaDB never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        *server = Some(child);
    }

    /// Crashes the server: SIGKILL of `mariadbd` (no shutdown, no flush of the buffer pool;
    /// the next [`start_again`](Self::start_again) recovers from the redo log).
    pub fn crash(&self) {
        let mut child = self
            .server
            .lock()
            .unwrap()
            .take()
            .expect("the private MariaDB runs");
        child.kill().expect("SIGKILL mariadbd");
        child.wait().expect("reap mariadbd");
    }

    /// The URL of database `test` as `root`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// The temporary directory (data directory, socket, pid file, log).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.get_mut().ok().and_then(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
