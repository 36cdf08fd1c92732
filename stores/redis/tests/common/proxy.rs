//! A TCP proxy on loopback that the test controls: it can freeze the connections it carries
//! (stop forwarding without closing them: a half-open connection, as a frozen load balancer or
//! a dead network path leaves behind) while new connections still go through, and it can send
//! new connections to another server (as a virtual IP or a DNS name that follows a failover).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

pub struct Proxy {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

struct Shared {
    target: Mutex<SocketAddr>,
    /// Connections numbered below this are frozen.
    frozen_below: AtomicU64,
    accepted: AtomicU64,
}

impl Proxy {
    /// A proxy to `target` on a free loopback port.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let address = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            target: Mutex::new(target),
            frozen_below: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let accept = tokio::spawn({
            let shared = shared.clone();
            async move {
                let mut connections = tokio::task::JoinSet::new();
                while let Ok((client, _)) = listener.accept().await {
                    let number = shared.accepted.fetch_add(1, Ordering::SeqCst);
                    let target = *shared.target.lock().unwrap();
                    let shared = shared.clone();
                    connections.spawn(async move {
                        let Ok(server) = TcpStream::connect(target).await else {
                            return;
                        };
                        let (client_read, client_write) = client.into_split();
                        let (server_read, server_write) = server.into_split();
                        tokio::join!(
                            forward(client_read, server_write, number, &shared),
                            forward(server_read, client_write, number, &shared),
                        );
                    });
                }
            }
        });
        Self {
            address,
            shared,
            accept,
        }
    }

    /// A proxy to the server listening on `port` on loopback.
    pub async fn to_port(port: u16) -> Self {
        Self::start(SocketAddr::from(([127, 0, 0, 1], port))).await
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.address)
    }

    /// Stops forwarding on every connection open now, in both directions, without closing
    /// them; connections opened afterwards work.
    pub fn freeze_open_connections(&self) {
        let accepted = self.shared.accepted.load(Ordering::SeqCst);
        self.shared.frozen_below.store(accepted, Ordering::SeqCst);
    }

    /// Sends connections opened from now on to the server on `port`; open connections stay
    /// with their server.
    pub fn redirect_new_connections(&self, port: u16) {
        *self.shared.target.lock().unwrap() = SocketAddr::from(([127, 0, 0, 1], port));
    }

    /// How many connections the proxy accepted.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` until either closes; once the connection is frozen, holds what it
/// read and forwards nothing more, and keeps both sockets open.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    number: u64,
    shared: &Shared,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        while number < shared.frozen_below.load(Ordering::SeqCst) {
            // Frozen: never forward, never close (the task ends when the proxy is dropped).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort(); // drops the JoinSet, which aborts every connection
    }
}
