//! Graceful shutdown: the first SIGTERM or SIGINT cancels a token every component watches.

use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first SIGTERM or SIGINT (or when it is cancelled by someone else).
pub fn cancel_on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for sigterm");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            () = terminate => tracing::info!("sigterm received, shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("sigint received, shutting down"),
            () = token.cancelled() => return,
        }
        token.cancel();
    });
}
