//! Stopping a webhook server: the signals that start the shutdown, and the webhook layer's
//! drain that ends it. Shared by the server examples.

use std::{future::Future, io, process::ExitCode, time::Duration};

use sangho_webhook::SanghoWebhookLayer;

/// How long the webhook handlers still running get to finish once the server has stopped.
/// Keep the orchestrator's grace period between SIGTERM and SIGKILL longer than this and the
/// server's own wait for its connections together (Kubernetes' `terminationGracePeriodSeconds`
/// is 30 s by default).
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(30);

/// Listens for SIGTERM (what `docker stop`, Kubernetes and systemd send) and Ctrl-C (SIGINT)
/// from now on; the future completes at the first of them.
///
/// Listening starts when this is called, not when the future is first polled: a signal that
/// arrives while the server is still starting is kept for it, rather than killing the process
/// with deliveries in progress.
///
/// # Errors
///
/// When the signal handlers cannot be installed.
pub fn shutdown_signal() -> io::Result<impl Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = interrupt.recv() => tracing::info!("Ctrl-C: shutting down"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            match tokio::signal::ctrl_c().await {
                Ok(()) => tracing::info!("Ctrl-C: shutting down"),
                Err(error) => {
                    tracing::error!(%error, "cannot listen for Ctrl-C; serving until killed");
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

/// Once the server has stopped accepting and its connections are closed: waits, up to
/// [`DRAIN_DEADLINE`], for the handlers `webhooks` still runs (a handler runs to its end even
/// when the provider hung up) and for its background settlements, then answers the exit
/// status.
///
/// Success when everything finished. Failure when some had to be cut off: their claims expire
/// with their leases, and the provider's next delivery processes those events again.
pub async fn drain(webhooks: &SanghoWebhookLayer) -> ExitCode {
    let drained = webhooks.drain(DRAIN_DEADLINE).await;
    if drained.is_complete() {
        tracing::info!("stopped: nothing left running");
        ExitCode::SUCCESS
    } else {
        tracing::error!(
            abandoned = drained.abandoned(),
            "stopped with webhook handlers or settlements cut off"
        );
        ExitCode::FAILURE
    }
}
