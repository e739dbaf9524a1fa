//! The admin API asked from outside: a token file as an operator makes one ([`token_file`]) and
//! requests to `/v1/admin/…` with or without it ([`request`], [`handoff`]).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::endpoint::Endpoint;

/// A token of 44 characters, as `head -c 32 /dev/urandom | base64` makes one.
pub const TOKEN: &str = "q8Zr1lWcVd7m2N0sXoE4yTfUj9Hk3PbAiLgR6vKe5Cw=";

/// Writes [`TOKEN`] and a newline to `dir/admin-token` with `mode`; returns the file.
pub fn token_file(dir: &Path, mode: u32) -> PathBuf {
    let file = dir.join("admin-token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    file
}

/// What the admin API answered.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The `WWW-Authenticate` header, if sent.
    pub www_authenticate: Option<String>,
    /// The `Allow` header, if sent.
    pub allow: Option<String>,
    /// The body as JSON; `Null` when it is not JSON.
    pub json: serde_json::Value,
    /// The body as text.
    pub text: String,
}

impl Answer {
    /// The body's `field` as text, `""` when absent.
    pub fn str(&self, field: &str) -> &str {
        self.json[field].as_str().unwrap_or_default()
    }
}

/// `METHOD path` on `endpoint`, with `Authorization: AUTHORIZATION` when given and `body` when
/// given; waits as long as a handoff may take.
pub async fn request(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> anyhow::Result<Answer> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()?;
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut request = client.request(method, format!("http://{}{path}", endpoint.addr()));
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    if let Some(body) = body {
        request = request
            .header("Content-Type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (status, www_authenticate, allow) = (
        response.status().as_u16(),
        header("www-authenticate"),
        header("allow"),
    );
    let text = response.text().await?;
    Ok(Answer {
        status,
        www_authenticate,
        allow,
        json: serde_json::from_str(&text).unwrap_or_default(),
        text,
    })
}

/// `POST /v1/admin/leases/LEASE/handoff` with [`TOKEN`] as bearer token and `body`, if any.
pub async fn handoff(
    endpoint: &Endpoint,
    lease: &str,
    body: Option<&str>,
) -> anyhow::Result<Answer> {
    request(
        endpoint,
        "POST",
        &format!("/v1/admin/leases/{lease}/handoff"),
        Some(&format!("Bearer {TOKEN}")),
        body,
    )
    .await
}
