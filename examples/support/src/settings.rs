//! The examples' settings, from the environment.

use std::net::SocketAddr;

use sangho_webhook::{signature::Secret, store::MokaStore};

use crate::BoxError;

/// The secret used when `SANGHO_WEBHOOK_SECRET` is unset. Never use it in production: anybody
/// who reads this can sign events for it.
pub const DEVELOPMENT_SECRET: &str = "whsec_development_only";

/// The store of the examples that know several, when `SANGHO_STORE_URL` is unset or empty.
pub const DEFAULT_STORE_URL: &str = "sqlite://sangho-webhooks.db";

/// The settings every example reads.
///
/// | variable | default | meaning |
/// | --- | --- | --- |
/// | `SANGHO_WEBHOOK_SECRET` | [`DEVELOPMENT_SECRET`] (with a warning) | the endpoint secret |
/// | `SANGHO_WEBHOOK_ADDR` | `127.0.0.1:3000` | where to listen |
/// | `SANGHO_STORE_URL` | the example's | the idempotency store |
#[derive(Clone, Debug)]
pub struct Settings {
    /// `SANGHO_WEBHOOK_SECRET`.
    pub secret: Secret,
    /// `SANGHO_WEBHOOK_ADDR`.
    pub address: SocketAddr,
    /// `SANGHO_STORE_URL`, unless unset or empty.
    pub store_url: Option<String>,
}

impl Settings {
    /// Reads the environment. A secret that cannot work (empty, or with surrounding
    /// whitespace such as a trailing newline) or an unparsable address is an error.
    pub fn from_env() -> Result<Self, BoxError> {
        let secret = match std::env::var("SANGHO_WEBHOOK_SECRET") {
            Ok(secret) => secret,
            Err(_) => {
                tracing::warn!(
                    "SANGHO_WEBHOOK_SECRET is unset: using the development secret {DEVELOPMENT_SECRET:?}. \
                     Anybody can forge events for it; never run like this in production."
                );
                DEVELOPMENT_SECRET.to_owned()
            }
        };
        let secret =
            Secret::new(secret).map_err(|error| format!("SANGHO_WEBHOOK_SECRET: {error}"))?;
        let address = std::env::var("SANGHO_WEBHOOK_ADDR")
            .unwrap_or_else(|_| "127.0.0.1:3000".to_owned())
            .parse()
            .map_err(|error| format!("SANGHO_WEBHOOK_ADDR: {error}"))?;
        let store_url = std::env::var("SANGHO_STORE_URL")
            .ok()
            .filter(|url| !url.is_empty());
        Ok(Self {
            secret,
            address,
            store_url,
        })
    }

    /// The store URL, or [`DEFAULT_STORE_URL`].
    pub fn store_url(&self) -> &str {
        self.store_url.as_deref().unwrap_or(DEFAULT_STORE_URL)
    }

    /// The in-memory store, for the examples that know no other: `SANGHO_STORE_URL` must be
    /// unset, empty or `memory:`.
    pub fn memory_store(&self) -> Result<MokaStore, BoxError> {
        match self.store_url.as_deref() {
            None | Some("memory:") => {
                tracing::warn!(
                    "using the in-memory store: it forgets processed events on restart and is \
                     not shared between replicas"
                );
                Ok(MokaStore::new())
            }
            Some(other) => Err(format!(
                "SANGHO_STORE_URL={:?}: this example knows `memory:` only; \
                 see `cargo run -p sangho-example-axum` for the SQL and Redis stores",
                crate::loggable_url(other)
            )
            .into()),
        }
    }
}
