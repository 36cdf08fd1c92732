//! A PostgreSQL server of the test's own (`initdb` and `pg_ctl` from
//! `/usr/lib/postgresql/*/bin`, or `SANGHO_TEST_PG_BIN`), on a free loopback port and a
//! temporary data directory, for the tests that crash or measure a server: never the shared
//! one. Run as the `postgres` user when the tests run as root (initdb refuses root). Stopped
//! (immediately) and deleted when dropped.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use super::{free_port, is_root};

/// A private PostgreSQL server.
pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

/// The directory of `initdb` and `pg_ctl`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("SANGHO_TEST_PG_BIN") {
        return dir.into();
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's binaries in /usr/lib/postgresql (or set SANGHO_TEST_PG_BIN)")
        .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("an initdb under /usr/lib/postgresql/*/bin")
}

impl PrivatePostgres {
    /// Creates and starts a server with trust authentication for `postgres`, plus
    /// `settings` (`name=value`, e.g. `fsync=on`).
    pub fn start(settings: &[&str]) -> Self {
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("sangho-pg-")
            .tempdir()
            .expect("a temporary directory");
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the data directory to postgres");
        }
        let server = Self {
            bin: bin_dir(),
            dir,
            port: free_port(),
            as_postgres,
        };
        let data = server.data();
        server.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-N",
            ],
        );
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\nmax_connections = 300\n",
            server.port,
            server.dir.path().display()
        );
        for setting in settings {
            conf.push_str(setting);
            conf.push('\n');
        }
        let conf_path = data.join("postgresql.auto.conf");
        let mut existing = std::fs::read_to_string(&conf_path).unwrap_or_default();
        existing.push_str(&conf);
        std::fs::write(&conf_path, existing).expect("write the settings");
        server.start_again();
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) -> Output {
        let program = self.bin.join(tool);
        let output = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .output()
        } else {
            Command::new(&program).args(args).output()
        }
        .unwrap_or_else(|error| panic!("run {}: {error}", program.display()));
        assert!(
            output.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the server (again), and waits until it accepts connections (at most 60 s).
    pub fn start_again(&self) {
        let (data, log) = (self.data(), self.log());
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the private server never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Crashes the server: `pg_ctl stop -m immediate` (every process quits without a
    /// checkpoint; the next start replays the WAL, as after a power loss of the server
    /// process or a kill -9 of a backend).
    pub fn crash(&self) {
        let data = self.data();
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    /// The URL of database `postgres` as user `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data();
        let program = self.bin.join("pg_ctl");
        let args = [
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ];
        // Best effort: the server may be down already.
        let _ = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .output()
        } else {
            Command::new(&program).args(args).output()
        };
    }
}
