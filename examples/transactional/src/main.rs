//! A payment recorded in one database transaction with the webhook event's completion.
//!
//! ```sh
//! cargo run -p sangho-example-transactional                       # SQLite: sangho-webhooks.db
//! SANGHO_STORE_URL=postgres://… cargo run -p sangho-example-transactional
//! ```
//!
//! It reads the main example's settings (`SANGHO_WEBHOOK_SECRET`, `SANGHO_WEBHOOK_ADDR`,
//! `SANGHO_STORE_URL`), with a SQL store only (`sqlite://FILE`, the default, or
//! `postgres://…`): the store, its purge task, and a `payments` table created at start in the
//! store's database. Each `payment_intent.succeeded` event is recorded there with its
//! completion (see the crate's `Payments::record`). SIGTERM or Ctrl-C stops it as the main
//! example does: the deliveries in progress, and the handlers whose provider hung up, finish
//! first.

use std::process::ExitCode;

use sangho_example_axum::serve;
use sangho_example_transactional::{Payments, app};
use sangho_examples_support::{
    BoxError, Settings, Store, exit_status, init_logging, loggable_url, shutdown_signal,
};

#[tokio::main]
async fn main() -> ExitCode {
    exit_status(run().await)
}

/// Serves until SIGTERM or Ctrl-C; answers the drain's exit status.
async fn run() -> Result<ExitCode, BoxError> {
    init_logging();
    let settings = Settings::from_env()?;
    let shutdown = shutdown_signal()?;
    let store = Store::connect(settings.store_url()).await?;
    let payments = Payments::of(&store).ok_or_else(|| {
        let url = loggable_url(settings.store_url());
        format!(
            "SANGHO_STORE_URL {url:?}: the payments need a SQL store (sqlite:// or postgres://)"
        )
    })?;
    payments.migrate().await?;
    let webhooks = store.webhooks(settings.secret.clone());
    serve(app(webhooks.layer.clone(), payments), &settings, shutdown).await?;
    Ok(webhooks.finish().await)
}
