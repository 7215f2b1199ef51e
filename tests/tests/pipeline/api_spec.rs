//! The writer's and the mailbox API's OpenAPI documents (`/openapi.json`), checked against the
//! running services by schemathesis (PyPI; the test command installs it): generated requests,
//! valid and invalid, get no 5xx, every response conforms to the document (status, content type,
//! body schema), and inputs the document rules out are answered 4xx.
//!
//! The services verify tokens as in production (HS256 with the test secret, no rate limits), and
//! schemathesis sends an operator token of one tenant (`gateway admin`): requests naming other
//! tenants are refused 403, malformed ones 400 before any authorization, and requests without a
//! token (its security tests) 401.

use std::process::Command;

use qim_testkit::tokens::{bearer, hs256_env, operator_token};
use qim_tests::services::{PipelineEnv, Service, ServiceBinaries, ServiceKind};

/// What schemathesis checks (its `--checks`): the three promises, and content types.
const CHECKS: &str =
    "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,negative_data_rejection";

/// The `schemathesis` executable: `QIM_SCHEMATHESIS`, else the one on `PATH`.
fn schemathesis() -> String {
    std::env::var("QIM_SCHEMATHESIS").unwrap_or_else(|_| "schemathesis".to_owned())
}

/// Runs schemathesis against `base`'s document with `token`; panics with its report when it
/// finds anything.
fn fuzz(name: &str, base: &str, token: &str) {
    let output = Command::new(schemathesis())
        .args(["run", &format!("{base}/openapi.json"), "--checks", CHECKS])
        .args(["--header", &format!("Authorization: {}", bearer(token))])
        .args(["--max-examples", "40", "--generation-deterministic", "--no-color"])
        .output()
        .unwrap_or_else(|e| {
            panic!("schemathesis did not run ({e}): the test command installs it (pip install schemathesis)")
        });
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{name}:\n{report}");
    assert!(output.status.success(), "schemathesis found problems in the {name} API:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_apis_answer_as_their_openapi_documents_say() {
    let bins = ServiceBinaries::locate().expect("service binaries");
    let env = PipelineEnv::fresh("api_spec").await.expect("a fresh run (is the stack up?)");
    let (secret_var, secret) = hs256_env();
    let auth = [
        ("QIM_AUTH_DISABLED", "false"),
        (secret_var, secret.as_str()),
        ("QIM_RATE_LIMIT_TENANT_PER_SEC", "0"),
        ("QIM_RATE_LIMIT_USER_PER_SEC", "0"),
    ];
    let token = operator_token("0123456789abcdef0123456789abcdef");
    for kind in [ServiceKind::Writer, ServiceKind::Dispatcher] {
        let mut service = Service::start(kind, &bins, &env, &auth).await.expect("the service starts");
        let base = service.base_url().to_owned();
        let doc: serde_json::Value = reqwest::get(format!("{base}/openapi.json"))
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("/openapi.json answers without a token")
            .json()
            .await
            .expect("the document is JSON");
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "OpenAPI 3.1: {}", doc["openapi"]);
        let paths = doc["paths"].as_object().expect("paths");
        assert!(!paths.is_empty() && paths.keys().all(|p| p.starts_with("/v1/")), "{:?}", paths.keys());
        let (name, token) = (kind.name(), token.clone());
        tokio::task::spawn_blocking(move || fuzz(name, &base, &token)).await.expect("the fuzz task");
        let status = service.terminate().await.expect("SIGTERM");
        assert!(status.success(), "{name} exits 0 on SIGTERM: {status:?}");
    }
}
