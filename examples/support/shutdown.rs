//! Stopping a webhook server: the signals that start the shutdown. Shared by the server
//! examples.

use std::{future::Future, io};

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
