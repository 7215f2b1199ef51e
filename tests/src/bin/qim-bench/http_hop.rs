//! The HTTP hop alone: an axum server (the writer's HTTP library, without the writer's
//! middleware: bearer check, body limit, request counter) whose send route decodes the writer's
//! request JSON and answers a send's JSON at once, without validating or committing anything. The
//! writer benchmark drives it with its own client, so the row it prints is a floor every send
//! through the writer's API pays before any store or Kafka work. The shapes below are copied
//! from `qim_writer`'s API (private there); keep them in step.

use std::net::SocketAddr;

use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The writer's send request, field for field (`POST /v1/messages`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // decoded, as the writer decodes it, and then dropped
struct SendBody {
    tenant: String,
    conversation: String,
    sender: String,
    client_message_id: String,
    #[serde(default)]
    kind: Option<String>,
    body: String,
    #[serde(default)]
    retention: Option<String>,
}

/// The writer's answer, field for field.
#[derive(Serialize)]
struct SendAnswer {
    message_id: String,
    conversation_seq: u64,
    created_at: i64,
}

async fn answer(Json(body): Json<SendBody>) -> Json<SendAnswer> {
    Json(SendAnswer {
        message_id: "0".repeat(32),
        conversation_seq: body.client_message_id.len() as u64,
        created_at: 1_790_000_000_000,
    })
}

/// A running echo server; stops when `shutdown` is cancelled.
pub struct HttpHop {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HttpHop {
    /// Binds 127.0.0.1 on a free port and serves `POST /v1/messages` until `shutdown`.
    pub async fn start(shutdown: CancellationToken) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new().route("/v1/messages", post(answer));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await
        });
        Ok(Self { addr, task })
    }

    /// Waits for the server to stop (after its `shutdown` was cancelled).
    pub async fn wait(self) -> anyhow::Result<()> {
        Ok(self.task.await??)
    }
}
