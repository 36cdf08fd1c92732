//! An example's server as a process of its own, for the tests of what only a process shows:
//! signals, the exit status, what it logs.
//!
//! The process is the example's binary, as `cargo run` runs it; an integration test of the
//! example's crate finds it in `CARGO_BIN_EXE_<name>`:
//!
//! ```no_run
//! # async fn example() {
//! use sangho_examples_support::testing::ExampleProcess;
//!
//! let mut example = ExampleProcess::start(
//!     "target/debug/sangho-example-axum", // env!("CARGO_BIN_EXE_sangho-example-axum")
//!     &[("SANGHO_STORE_URL", "memory:")],
//! );
//! let address = example.wait_listening().await;
//! example.signal("TERM");
//! # }
//! ```

use std::{
    io::{BufRead, BufReader, Read},
    net::SocketAddr,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// How long the example gets to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The example's running process, killed when dropped.
#[derive(Debug)]
pub struct ExampleProcess {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl ExampleProcess {
    /// Starts the example's binary `program` with `env` (over
    /// `SANGHO_WEBHOOK_ADDR=127.0.0.1:0`, the default log filter, no colours and nothing else
    /// of the test's `SANGHO_*` or `RUST_LOG` settings).
    pub fn start(program: &str, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(program);
        command
            .env("SANGHO_WEBHOOK_ADDR", "127.0.0.1:0")
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .env_remove("SANGHO_WEBHOOK_SECRET")
            .env_remove("SANGHO_STORE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start the example's process");
        let output = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().expect("stdout"), output.clone());
        collect(child.stderr.take().expect("stderr"), output.clone());
        Self { child, output }
    }

    /// Everything the process printed so far (its log and its errors), colours removed.
    pub fn output(&self) -> String {
        strip_colours(&self.output.lock().unwrap())
    }

    /// Waits for a line of the output that contains `text`, and answers it.
    pub async fn wait_for_line(&mut self, text: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.output().lines().find(|line| line.contains(text)) {
                return line.to_owned();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the readers take the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Some(line) = self.output().lines().find(|line| line.contains(text)) {
                    return line.to_owned();
                }
                panic!(
                    "the example ended ({status}) without printing {text:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the example did not print {text:?} within {timeout:?}:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the example listens; answers its address (the `address` field of its
    /// `listening` line).
    pub async fn wait_listening(&mut self) -> SocketAddr {
        let line = self.wait_for_line("listening", START_TIMEOUT).await;
        let address = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("address="))
            .unwrap_or_else(|| panic!("no address= in {line:?}"));
        address
            .parse()
            .unwrap_or_else(|_| panic!("not an address: {address:?}"))
    }

    /// Sends the process `signal` (`TERM`, `INT`) with `kill`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal}: {status}");
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("the process's status")
            .is_none()
    }

    /// Waits for the process to end within `timeout`; answers its status.
    pub async fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("the process's status") {
                // Let the readers take the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the example still runs after {timeout:?}:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ExampleProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Appends every line `from` prints to `output`, from a thread of its own.
fn collect(from: impl Read + Send + 'static, output: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            let mut output = output.lock().unwrap();
            output.push_str(&line);
            output.push('\n');
        }
    });
}

/// `text` without its ANSI escape sequences (`ESC [ … letter`).
fn strip_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Opens a connection to `address` and writes `request` to it as HTTP/1.1, with
/// `Connection: close`; answers the connection, to read the answer from ([`read_answer`]) or
/// to hang up (drop it).
pub async fn send_raw(
    address: SocketAddr,
    request: http::Request<sangho_webhook::WebhookBody>,
) -> std::net::TcpStream {
    use http_body_util::BodyExt as _;
    use std::io::Write as _;

    let (parts, body) = request.into_parts();
    let body = body.collect().await.expect("a full body").to_bytes();
    let mut head = format!(
        "{} {} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-length: {}\r\n",
        parts.method,
        parts.uri,
        body.len()
    );
    for (name, value) in &parts.headers {
        let value = value.to_str().expect("a text header");
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = std::net::TcpStream::connect(address).expect("connect to the example");
    stream.write_all(head.as_bytes()).expect("write the head");
    stream.write_all(&body).expect("write the body");
    stream
}

/// Reads the whole answer from `stream`; answers its status and body.
pub async fn read_answer(stream: std::net::TcpStream) -> (http::StatusCode, String) {
    let answer = tokio::task::spawn_blocking(move || {
        let mut stream = stream;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read timeout");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read the answer");
        answer
    })
    .await
    .expect("the reader");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| http::StatusCode::from_u16(code).ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}
