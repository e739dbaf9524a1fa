//! The admin API of real `leasehold run` processes on a SQLite file, asked from outside: off
//! (404, nothing moves) without a token file; with one, a request without the token, or with
//! another, is 401 and moves nothing, and every other answer is what its request deserves
//! (405, 404, 400, 409, 503, 504); a token file others may read is refused at start-up, naming
//! the file; `config check` shows the file and never the token; a client refused thousands of
//! times is logged once and then counted. The handoff itself, between replicas running plugins,
//! is in `tests/tests/leases/handoff.rs`.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold::lease::Epoch;
use std::path::Path;
use std::time::Duration;

use leasehold_tests::admin::{self, TOKEN, token_file};
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder, binary, run_to_exit};
use leasehold_tests::log::Logged;
use leasehold_tests::status::{Role, StatusExt};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Short, so that a reservation for a replica that does not exist lapses quickly.
const TTL: Duration = Duration::from_secs(3);

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("leases.db").display())
}

/// The epoch of `leader` as `host` reads it from the store, and who holds it.
async fn holder_and_epoch(host: &Host) -> (String, Epoch) {
    let status = host.status().await.unwrap();
    let lease = status.lease("leader").unwrap();
    (
        lease.holder.clone().unwrap_or_default(),
        lease.epoch.unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_file_the_admin_tree_is_404_saying_how_to_turn_it_on_and_nothing_moves() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let a = HostBuilder::new("a")
        .database_url(&url)
        .ttl(TTL)
        .spawn_leading("leader")
        .await
        .unwrap();
    let before = holder_and_epoch(&a).await;
    let bearer = format!("Bearer {TOKEN}");
    for (method, path) in [
        ("POST", "/v1/admin/leases/leader/handoff"),
        ("GET", "/v1/admin/leases/leader/handoff"),
        ("POST", "/v1/admin"),
        ("DELETE", "/v1/admin/anything"),
    ] {
        let answer = admin::request(&a, method, path, Some(&bearer), Some("{}"))
            .await
            .unwrap();
        assert_eq!(answer.status, 404, "{method} {path}: {answer:?}");
        let said = answer.str("error");
        assert!(
            said.contains("the admin API is off") && said.contains("admin_token_file"),
            "{method} {path}: {answer:?}"
        );
    }
    // Nothing was asked of the holder: it keeps the lease at its epoch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(holder_and_epoch(&a).await, before);
    assert!(
        !a.log_text().contains("handoff requested"),
        "{}",
        a.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_is_401_and_every_other_request_gets_the_answer_it_deserves() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let token = token_file(dir.path(), 0o600);
    let host = |name: &str| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(TTL)
            .args(&["--admin-token-file", token.to_str().unwrap()])
    };
    let a = host("a").spawn_leading("leader").await.unwrap();
    let b = host("b").spawn().await.unwrap();
    let before = holder_and_epoch(&a).await;
    let path = "/v1/admin/leases/leader/handoff";

    // No token, another token, another scheme: 401, with the challenge, and nothing moves.
    for authorization in [
        None,
        Some("Bearer not-the-token-not-the-token-not-the-token".to_string()),
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Basic {TOKEN}")),
    ] {
        let answer = admin::request(&b, "POST", path, authorization.as_deref(), None)
            .await
            .unwrap();
        assert_eq!(answer.status, 401, "{authorization:?}: {answer:?}");
        assert!(
            answer
                .www_authenticate
                .as_deref()
                .is_some_and(|c| c.starts_with("Bearer")),
            "{answer:?}"
        );
        assert!(!answer.text.contains(TOKEN), "{answer:?}");
    }
    // An unknown route is not answered without the token either.
    let answer = admin::request(&b, "POST", "/v1/admin/other", None, None)
        .await
        .unwrap();
    assert_eq!(answer.status, 401, "{answer:?}");
    // The host logs from a thread of its own: wait for the line rather than read the log once.
    b.wait_for_log("admin request refused", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!b.log_text().contains(TOKEN), "{}", b.log_text());

    // With the token: the wrong method, an unknown route, bad input, a misspelt lease.
    let bearer = format!("Bearer {TOKEN}");
    let answer = admin::request(&b, "GET", path, Some(&bearer), None)
        .await
        .unwrap();
    assert_eq!(
        (answer.status, answer.allow.as_deref()),
        (405, Some("POST")),
        "{answer:?}"
    );
    let answer = admin::request(&b, "POST", "/v1/admin/leases/leader", Some(&bearer), None)
        .await
        .unwrap();
    assert_eq!(answer.status, 404, "{answer:?}");
    for (lease, body, says) in [
        ("leader", Some(r#"{"timeout_ms": 600000}"#), "1 to 60000"),
        ("leader", Some(r#"{"to": "b c"}"#), "\"b c\""),
        ("leader", Some(r#"{"too": "b"}"#), "unknown field"),
        ("leader", Some("to=b"), "is not {"),
        ("no%20such", None, "invalid lease name"),
    ] {
        let answer = admin::handoff(&b, lease, body).await.unwrap();
        assert_eq!(answer.status, 400, "{lease} {body:?}: {answer:?}");
        assert!(answer.str("error").contains(says), "{answer:?}");
    }
    let answer = admin::handoff(&b, "ledaer", None).await.unwrap();
    assert_eq!(answer.status, 404, "{answer:?}");
    assert!(
        answer.str("error").contains("did you mean leader?"),
        "{answer:?}"
    );
    let answer = admin::handoff(&b, "leader", Some(r#"{"to": "a"}"#))
        .await
        .unwrap();
    assert_eq!(answer.status, 409, "{answer:?}");
    assert!(answer.str("error").contains("already"), "{answer:?}");

    // None of these asked the holder for anything.
    assert_eq!(holder_and_epoch(&a).await, before);
    assert_eq!(b.role("leader").await, Some(Role::Standby));
    assert!(
        !a.log_text().contains("handoff requested"),
        "{}",
        a.log_text()
    );

    // Four requests whose bodies never come hold the four slots: a fifth is 503. (The fifth
    // names the holder as `to`, so that it would move nothing should it find a slot free.)
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(b.addr()).await.unwrap();
        stream
            .write_all(
                format!(
                    "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        stalled.push(stream);
    }
    eventually(
        "a fifth request to be 503",
        Duration::from_secs(3),
        async || {
            let answer = admin::handoff(&b, "leader", Some(r#"{"to": "a"}"#))
                .await
                .unwrap();
            when(answer.status, |s| *s == 503)
        },
    )
    .await
    .unwrap();
    drop(stalled);
    assert_eq!(holder_and_epoch(&a).await, before);

    // Handed to a replica that does not exist: the holder releases, nobody may take the lease
    // for its ttl, and the wait runs out (504); meanwhile nobody holds it (409).
    let answer = admin::handoff(&b, "leader", Some(r#"{"to": "nobody", "timeout_ms": 500}"#))
        .await
        .unwrap();
    assert_eq!(answer.status, 504, "{answer:?}");
    assert!(
        answer.str("error").contains("no replica took it") && answer.str("ended") == "released",
        "{answer:?}"
    );
    let answer = admin::handoff(&b, "leader", None).await.unwrap();
    assert_eq!(answer.status, 409, "{answer:?}");
    assert!(
        answer.str("error").contains("not held by anyone"),
        "{answer:?}"
    );
    // After the reservation, a replica takes it again at the next epoch.
    eventually("a replica to lead again", TTL * 4, async || {
        let status = a.status().await.ok();
        let epoch = status.and_then(|s| s.lease("leader").and_then(|l| l.epoch));
        when(epoch, |e| e.is_some_and(|e| e > before.1))
    })
    .await
    .unwrap();
}

/// The attack: one client asks without the token as fast as it is answered, on one kept-alive
/// connection, for 5 s. Each request is refused (401) and nothing moves; the log says the
/// address's first refusal in full, and then how many more came, in a line every 10 s rather
/// than a line a request. Another address's first refusal has a line of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_refused_thousands_of_times_is_logged_once_and_then_counted() {
    const FLOOD: Duration = Duration::from_secs(5);
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let token = token_file(dir.path(), 0o600);
    let a = HostBuilder::new("a")
        .database_url(&url)
        .ttl(TTL)
        .args(&["--admin-token-file", token.to_str().unwrap()])
        .spawn_leading("leader")
        .await
        .unwrap();
    let before = holder_and_epoch(&a).await;
    let from = a.log_len();
    let url = format!("http://{}/v1/admin/leases/leader/handoff", a.addr());
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let (mut refused, mut other) = (0u64, 0u64);
    for _ in 0..1_000_000 {
        if started.elapsed() >= FLOOD {
            break;
        }
        let answer = client
            .post(&url)
            .header(
                "Authorization",
                "Bearer not-the-token-not-the-token-not-the-token",
            )
            .send()
            .await
            .unwrap();
        match answer.status().as_u16() {
            401 => refused += 1,
            _ => other += 1,
        }
        let _ = answer.bytes().await;
    }
    assert_eq!(other, 0, "{refused} refused");
    assert!(
        refused >= 100,
        "the flood did not happen: {refused} requests"
    );
    // Another address: its first refusal is logged in full too.
    let elsewhere = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let answer = elsewhere.post(&url).send().await.unwrap();
    assert_eq!(answer.status(), 401);

    let first = |line: &String, address: &str| {
        line.contains("admin request refused:") && line.contains(&format!("from={address}:"))
    };
    let counted = |lines: &[String]| -> u64 {
        lines
            .iter()
            .filter_map(|l| l.split("admin requests refused: ").nth(1))
            .filter_map(|rest| rest.split_once(" more from 127.0.0.1 "))
            .filter_map(|(n, _)| n.parse::<u64>().ok())
            .sum()
    };
    let lines = eventually(
        "the refusals counted in the log",
        leasehold::testing::REFUSALS_LOGGED_EVERY * 2,
        async || {
            let lines = a.log_lines_from(from);
            when(lines, |lines| counted(lines) >= refused - 1)
        },
    )
    .await
    .unwrap();
    let refusal_lines: Vec<&String> = lines.iter().filter(|l| l.contains("refused")).collect();
    println!(
        "{refused} requests refused in {FLOOD:?}; {} log lines of refusals:\n{}",
        refusal_lines.len(),
        refusal_lines
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        counted(&lines),
        refused - 1,
        "every refusal after the first counted once"
    );
    assert_eq!(lines.iter().filter(|l| first(l, "127.0.0.1")).count(), 1);
    assert_eq!(lines.iter().filter(|l| first(l, "127.0.0.2")).count(), 1);
    assert!(
        refusal_lines.len() <= 5,
        "a line a request, or nearly: {}",
        refusal_lines.len()
    );
    assert_eq!(holder_and_epoch(&a).await, before, "nothing moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_others_may_read_or_a_short_token_is_refused_at_start_up_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let token = token_file(dir.path(), 0o644);
    let shown = token.display().to_string();
    let run = |file: &str| {
        vec![
            "run".to_string(),
            "--database-url".into(),
            url.clone(),
            "--http".into(),
            "127.0.0.1:0".into(),
            "--admin-token-file".into(),
            file.to_string(),
        ]
    };
    let args = run(&shown);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, err) = run_to_exit(&args, Duration::from_secs(30)).await.unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("admin_token_file {shown}"))
            && err.contains(&format!("chmod 600 {shown}"))
            && err.contains("0644")
            && !err.contains(TOKEN),
        "{err}"
    );
    std::fs::write(&token, "short\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (status, err) = run_to_exit(&args, Duration::from_secs(30)).await.unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&shown) && err.contains("5 characters") && err.contains("32"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_shows_the_token_file_and_never_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), 0o600);
    let shown = token.display().to_string();
    for (args, env) in [
        (
            vec!["config", "check", "--admin-token-file", shown.as_str()],
            None,
        ),
        (
            vec!["config", "check"],
            Some(("LEASEHOLD_ADMIN_TOKEN_FILE", shown.as_str())),
        ),
    ] {
        let mut cmd = tokio::process::Command::new(binary().unwrap());
        cmd.args(&args)
            .env_remove("LEASEHOLD_DATABASE_URL")
            .env_remove("LEASEHOLD_CONFIG");
        if let Some((key, value)) = env {
            cmd.env(key, value);
        }
        let out = cmd.output().await.unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        assert!(
            stdout.contains(&format!("admin_token_file = {shown:?}")),
            "{args:?}: {stdout}"
        );
        assert!(
            !stdout.contains(TOKEN) && !stderr.contains(TOKEN),
            "{args:?}: {stdout}{stderr}"
        );
    }
}
