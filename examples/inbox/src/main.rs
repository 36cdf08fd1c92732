//! The inbox example: each verified event is stored durably and answered 202 at once, then
//! processed by workers running in the same process, with retries, dead letters and replays.
//!
//! ```sh
//! cargo run -p sangho-example-inbox                       # SQLite, sangho-inbox.db
//! SANGHO_STORE_URL=postgres://app@db/app cargo run -p sangho-example-inbox
//! SANGHO_STORE_URL=sqlite://sangho-inbox.db cargo run -p sangho-tools -- inbox stats
//! ```
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `SANGHO_WEBHOOK_SECRET` | `whsec_development_only` (with a warning) | the endpoint secret |
//! | `SANGHO_WEBHOOK_ADDR` | `127.0.0.1:3000` | where to listen |
//! | `SANGHO_STORE_URL` | `sqlite://sangho-inbox.db` | the inbox: `sqlite://FILE` or `postgres://…` |
//!
//! `memory:` and `redis://` are refused at start: inbox mode answers 2xx only for an event it
//! stored durably. Several processes may share one PostgreSQL database (workers take events
//! with `SKIP LOCKED`, and wake each other with `LISTEN/NOTIFY`); one SQLite file serves the
//! processes of one host (its single writer serializes them; workers of other processes find
//! new events within the poll interval, 1 s).
//!
//! The table holds the provider's events, personal data included, in clear: give read access
//! to the application and its operators only.
//!
//! Events are keyed by their object's id (`data.object.id`): the events of one object are
//! processed one at a time, in the order they arrived. `GET /health` answers the inbox's
//! numbers, and 503 when the oldest waiting event waited over 5 min or events wait and the
//! workers took none for 60 s.
//!
//! SIGTERM or Ctrl-C: the server stops accepting and finishes its requests; the workers stop
//! taking events, let running handlers finish for up to 30 s, and give back what they abandon
//! (due again at once, the attempt not counted).

use std::{process::ExitCode, time::Duration};

use sangho_example_axum::serve;
use sangho_example_inbox::{Health, app, handlers, open};
use sangho_examples_support::{BoxError, Settings, exit_status, init_logging, shutdown_signal};
use sangho_webhook::inbox::{InboxReceiver, InboxWorker, object_id};

/// The inbox when `SANGHO_STORE_URL` is unset.
const DEFAULT_STORE_URL: &str = "sqlite://sangho-inbox.db";

/// How long running handlers may finish at shutdown.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> ExitCode {
    exit_status(run().await)
}

async fn run() -> Result<ExitCode, BoxError> {
    init_logging();
    let mut settings = Settings::from_env()?;
    let url = settings
        .store_url
        .get_or_insert_with(|| DEFAULT_STORE_URL.to_owned())
        .clone();
    let shutdown = shutdown_signal()?;
    let (store, purge) = open(&url).await?;
    let inbox = store.inbox();
    // The events of one object (an invoice, a subscription...) are processed one at a time,
    // in the order they arrived.
    let receiver = InboxReceiver::builder(settings.secret.clone(), inbox.clone())
        .with_ordering_key(object_id)
        .build()?;
    let workers = InboxWorker::builder(inbox.clone(), handlers())
        .build()?
        .start();
    let health = Health::new(inbox, workers.metrics());
    serve(app(receiver, health), &settings, shutdown).await?;
    let finished = workers.shutdown(SHUTDOWN_DEADLINE).await;
    purge.stop().await;
    Ok(if finished {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
