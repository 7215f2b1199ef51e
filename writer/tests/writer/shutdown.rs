//! SIGTERM with sends in flight: the real `qim-writer` stops accepting, answers every request it
//! had accepted once its commit is done, flushes the producer and exits 0. Every acknowledged
//! message is in Kafka.

use crate::support;

use std::time::Duration;

use qim_store::ids::{ConversationId, TenantId, UserId};
use qim_testkit::metrics::Exposition;
use qim_testkit::ports::free_port;
use support::{create_topic, fresh, read_topic, send_body, spawn_writer, wait_ready, Client, Kind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_commits_and_exits_zero() {
    let topic = create_topic().await;
    let config = support::config(Kind::Redis, &topic).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = spawn_writer(&config, port, None);
    wait_ready(&base).await;
    let (tenant, conversation, alice) = (fresh(TenantId), fresh(ConversationId), fresh(UserId));
    Client::new(&base).add_members(tenant, conversation, &[alice]).await;
    let http = reqwest::Client::new();
    let token = support::operator_token(&tenant.to_hex());
    let sends: Vec<_> = (0..200)
        .map(|n| {
            let request = http
                .post(format!("{base}/v1/messages"))
                .bearer_auth(&token)
                .json(&send_body(tenant, conversation, alice, &format!("s{n}"), "bye"))
                .send();
            tokio::spawn(async move {
                match request.await {
                    Ok(r) => Some((n, r.status().as_u16(), r.json::<serde_json::Value>().await.ok())),
                    Err(_) => None, // not accepted: the listener had closed
                }
            })
        })
        .collect();
    // SIGTERM once the writer has begun committing (a commit holds a permit or is done).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
        let metrics = Exposition::parse(&text);
        if metrics.sum("qim_writer_commits_in_flight", &[]) > 0.0 || metrics.sum("qim_writer_commits_total", &[]) > 0.0
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no send began committing within 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let term = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(term.success());
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "a graceful stop exits 0: {status:?}");
    let mut answered = Vec::new();
    for s in sends {
        if let Some((n, code, body)) = s.await.unwrap() {
            assert_eq!(code, 200, "an accepted send is finished, not cut off: {body:?}");
            answered.push((n, body.unwrap()));
        }
    }
    assert!(!answered.is_empty(), "some sends were in flight when SIGTERM arrived");
    let published = read_topic(&topic);
    for (n, answer) in &answered {
        let client_id = format!("s{n}");
        let r = published.iter().find(|r| r.client_message_id.as_str() == client_id);
        let r = r.unwrap_or_else(|| panic!("acknowledged {client_id} is not in Kafka"));
        assert_eq!(r.seq.0, answer["conversation_seq"].as_u64().unwrap());
    }
    eprintln!("{} of 200 sends accepted and finished before the writer exited", answered.len());
}
