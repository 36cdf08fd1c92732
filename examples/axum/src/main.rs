//! The main example: an axum server that receives Sangho webhooks.
//!
//! ```sh
//! cargo run -p sangho-example-axum
//! ```
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SANGHO_WEBHOOK_SECRET` | `whsec_development_only` (with a warning) | the endpoint secret |
//! | `SANGHO_WEBHOOK_ADDR` | `127.0.0.1:3000` | where to listen |
//! | `SANGHO_STORE_URL` | `sqlite://sangho-webhooks.db` | the idempotency store (below) |
//!
//! | `SANGHO_STORE_URL` | store |
//! | --- | --- |
//! | `sqlite://FILE` | `SqliteStore` on FILE (created if missing): durable, one server |
//! | `postgres://…` | `PostgresStore`: durable, shared by every replica |
//! | `redis://…` | `RedisStore`: shared by every replica, completed events expire by themselves |
//! | `memory:` | `MokaStore`: forgotten on restart, one process only |
//!
//! The SQL stores are migrated at start, and a purge task deletes completed events past the
//! retention every hour. It serves `POST /webhooks/sangho`, logs each event and answers
//! `{"received":true}`, and `GET /health` beside it. (Recording a payment in the same
//! transaction as the event's completion: the transactional example.)
//!
//! SIGTERM (`docker stop`, Kubernetes, systemd) or Ctrl-C stops it gracefully: it stops
//! accepting, lets the requests in progress finish, waits for the webhook handlers still
//! running (those whose provider hung up included), and exits 0 (1 if the drain's 30 s
//! deadline had to cut some off). A setting that cannot work (a secret with a trailing newline,
//! say) stops it at start with the reason. The log shows the store's scheme, host, port and
//! path, never its user name, password or query.

use std::process::ExitCode;

use sangho_example_axum::{app, serve};
use sangho_examples_support::{
    BoxError, Settings, Store, exit_status, init_logging, shutdown_signal,
};

#[tokio::main]
async fn main() -> ExitCode {
    exit_status(run().await)
}

/// Serves until SIGTERM or Ctrl-C; answers the drain's exit status.
async fn run() -> Result<ExitCode, BoxError> {
    init_logging();
    let settings = Settings::from_env()?;
    // Listening from the start: a SIGTERM while the store connects is a graceful stop too.
    let shutdown = shutdown_signal()?;
    let webhooks = Store::connect(settings.store_url())
        .await?
        .webhooks(settings.secret.clone());
    serve(app(webhooks.layer.clone()), &settings, shutdown).await?;
    Ok(webhooks.finish().await)
}
