//! Programs nobody on the project wrote, run under a lease the way their users run them:
//!
//! - redis as a `[[service]]` whose `activate` starts it with `--daemonize yes` and whose
//!   `deactivate` is `redis-cli shutdown`: three replicas on a real PostgreSQL, the holder's host
//!   stopped (SIGTERM), killed alone (SIGKILL) or frozen alone (SIGSTOP for 3×ttl); a thread
//!   asks every replica's redis `PING` every 10 ms and no sample may find two answering, and the
//!   old term's `deactivate` must have ended before the new term's `activate` began;
//! - nginx under `leasehold exec`, started as nginx usually is (it daemonizes): the warning names
//!   the cause once, and a lone replica backs off instead of taking an epoch at every poll.
//!
//! `LEASEHOLD_TRIALS` sets the trials per fault for the redis test (1 by default; the figures in
//! the README come from 10).

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{Host, HostBuilder};
use leasehold_tests::log::Logged;
use leasehold_tests::pg::free_port;

const TTL: Duration = Duration::from_secs(2);

/// Whether redis answers `PING` on `port` within 50 ms.
fn pong(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(50)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    matches!(stream.read(&mut answer), Ok(n) if answer[..n].starts_with(b"+PONG"))
}

/// Asks every port `PING` every 10 ms until dropped, counting samples with two answering.
struct Watch {
    stop: Arc<AtomicBool>,
    doubles: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
}

impl Watch {
    fn start(ports: Vec<u16>) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let doubles = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        let (s, d, n) = (stop.clone(), doubles.clone(), samples.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let answering = ports.iter().filter(|p| pong(**p)).count();
                n.fetch_add(1, Ordering::Relaxed);
                if answering > 1 {
                    d.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Watch {
            stop,
            doubles,
            samples,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `(epoch, what, nanos, rc)` of each line the scripts appended to `file`.
fn history(file: &Path) -> Vec<(i64, String, u128, i32)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.split(' ');
            Some((
                p.next()?.parse().ok()?,
                p.next()?.to_string(),
                p.next()?.parse().ok()?,
                p.next().and_then(|rc| rc.parse().ok()).unwrap_or(0),
            ))
        })
        .collect()
}

/// The redis service of replica `name` on `port`: started by `activate` as a daemon, stopped by
/// `deactivate`, both recorded in `history` with the term's epoch.
fn redis_replica(name: &str, url: &str, dir: &Path, port: u16) -> HostBuilder {
    let d = dir.display();
    let h = dir.join("history");
    let h = h.display();
    let config = format!(
        r#"leases = ["redis"]
[[service]]
name = "redis"
activate = ["sh", "-c", "echo \"$LEASEHOLD_EPOCH activate $(date +%s%N)\" >> {h}; redis-server --port {port} --bind 127.0.0.1 --daemonize yes --save '' --appendonly no --dir {d} --pidfile {d}/redis-{port}.pid --logfile {d}/redis-{port}.log"]
deactivate = ["sh", "-c", "redis-cli -p {port} shutdown nosave; rc=$?; echo \"$LEASEHOLD_EPOCH deactivate $(date +%s%N) $rc\" >> {h}; exit $rc"]
"#
    );
    HostBuilder::new(name)
        .database_url(url)
        .ttl(TTL)
        .config(&config)
}

/// Which of `hosts` leads `redis` now, by its own word.
async fn holder(hosts: &[Option<Host>]) -> Option<usize> {
    for (i, host) in hosts.iter().enumerate() {
        if let Some(host) = host
            && host.role("redis").await == Some(leasehold::lease::Role::Leader)
        {
            return Some(i);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_started_by_activate_is_one_redis_through_sigterm_sigkill_and_sigstop_of_its_holder()
{
    let trials: usize = std::env::var("LEASEHOLD_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let dir = tempfile::tempdir().unwrap();
    let history_file = dir.path().join("history");
    let url = leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port().unwrap()).collect();
    let names = ["a", "b", "c"];
    let mut hosts: Vec<Option<Host>> = Vec::new();
    for (name, port) in names.iter().zip(&ports) {
        let host = redis_replica(name, &url, dir.path(), *port)
            .spawn()
            .await
            .unwrap();
        hosts.push(Some(host));
    }
    let watch = Watch::start(ports.clone());
    let mut epoch = 0i64;
    for fault in ["TERM", "KILL", "STOP"] {
        for trial in 0..trials {
            // One redis answering, its holder's.
            let (i, held) = eventually("one holder", Duration::from_secs(20), async || {
                let i = holder(&hosts).await;
                let h = history(&history_file);
                let last = h.iter().filter(|l| l.1 == "activate").map(|l| l.0).max();
                match (i, last) {
                    (Some(i), Some(e)) if e > epoch && pong(ports[i]) => Ok((i, e)),
                    _ => Err(format!("holder {i:?}, last activate {last:?}")),
                }
            })
            .await
            .unwrap();
            epoch = held;
            let began = Instant::now();
            let host = hosts[i].as_mut().unwrap();
            host.signal(fault).unwrap();
            // The next term activated somewhere else, after this one's deactivate.
            let next = epoch + 1;
            let h = eventually(
                format!("{fault} trial {trial}: epoch {next} activated"),
                Duration::from_secs(30),
                async || {
                    when(history(&history_file), |h| {
                        h.iter().any(|l| l.0 == next && l.1 == "activate")
                    })
                },
            )
            .await
            .unwrap();
            let deactivated = h.iter().find(|l| l.0 == epoch && l.1 == "deactivate");
            let activated = h.iter().find(|l| l.0 == next && l.1 == "activate").unwrap();
            let deactivated = deactivated.unwrap_or_else(|| {
                panic!("{fault}: epoch {epoch} never deactivated before {next} activated: {h:?}")
            });
            assert_eq!(
                deactivated.3, 0,
                "{fault}: redis-cli shutdown failed: {h:?}"
            );
            assert!(deactivated.2 < activated.2, "{fault}: {h:?}");
            eventually(
                "the new redis answers",
                Duration::from_secs(10),
                async || when(ports.iter().filter(|p| pong(**p)).count(), |n| *n == 1),
            )
            .await
            .unwrap();
            eprintln!(
                "{fault} trial {trial}: epoch {epoch} deactivated {:.0} ms before epoch {next} activated; new redis answering {:.0} ms after the signal",
                (activated.2 - deactivated.2) as f64 / 1e6,
                began.elapsed().as_secs_f64() * 1e3
            );
            match fault {
                "STOP" => {
                    tokio::time::sleep((TTL * 3).saturating_sub(began.elapsed())).await;
                    let host = hosts[i].as_ref().unwrap();
                    host.signal("CONT").unwrap();
                    host.wait_for_log(
                        "the keeper began deactivate on its own",
                        Duration::from_secs(10),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
                }
                _ => {
                    let mut old = hosts[i].take().unwrap();
                    let _ = old.wait_exit(Duration::from_secs(20)).await;
                    let host = redis_replica(names[i], &url, dir.path(), ports[i])
                        .spawn()
                        .await
                        .unwrap();
                    hosts[i] = Some(host);
                }
            }
        }
    }
    let (doubles, samples) = (
        watch.doubles.load(Ordering::Relaxed),
        watch.samples.load(Ordering::Relaxed),
    );
    drop(watch);
    eprintln!("{samples} samples of every redis, {doubles} with two answering");
    assert_eq!(
        doubles, 0,
        "two redis answered at once in {doubles} samples"
    );
    let h = history(&history_file);
    assert!(
        h.iter().all(|l| l.1 != "deactivate" || l.3 == 0),
        "a deactivate failed: {h:?}"
    );
    // Each host's activations went through on the first try.
    for host in hosts.iter().flatten() {
        let log = host.log_text();
        assert!(!log.contains("activate failed"), "{log}");
    }
    for mut host in hosts.into_iter().flatten() {
        let _ = host.stop(Duration::from_secs(20)).await;
    }
}

/// nginx's configuration for a run under a lease from `dir`: its pid file, logs and temporary
/// files there, serving 200 on `port`. It daemonizes, as nginx does unless told otherwise.
fn nginx_conf(dir: &Path, port: u16) -> PathBuf {
    let d = dir.display();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n  access_log off;\n  \
             client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
             server {{ listen 127.0.0.1:{port}; location / {{ return 200 \"ok\\n\"; }} }}\n}}\n"
        ),
    )
    .unwrap();
    conf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_daemonizing_under_exec_gets_one_hint_and_a_lone_replica_backs_off() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let conf = nginx_conf(dir.path(), port);
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let mut host = HostBuilder::new("ngx")
        .database_url(&url)
        .lease("ngx")
        .ttl(TTL)
        .exec(&[
            "nginx",
            "-c",
            conf.to_str().unwrap(),
            "-p",
            dir.path().to_str().unwrap(),
        ])
        .spawn()
        .await
        .unwrap();
    let hint = host
        .wait_for_log("did it daemonize?", Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    assert!(hint.contains("daemon off;"), "{hint}");
    let watched = Duration::from_secs(30);
    tokio::time::sleep(watched).await;
    let log = host.log_text();
    let epochs = log.matches("lease acquired").count();
    eprintln!("a lone replica running a daemonizing nginx: {epochs} epochs in 30 s");
    // 0.5 s, 1 s, 2 s, 4 s, 8 s, 16 s beyond each step-down's poll: six terms in 30 s at most,
    // where one a poll (every 0.4–2.3 s) was taken before.
    assert!(epochs <= 6, "{epochs} epochs in 30 s:\n{log}");
    assert_eq!(log.matches("did it daemonize?").count(), 1, "{log}");
    assert!(log.contains("waits"), "{log}");
    host.stop(Duration::from_secs(20)).await.unwrap();
    // Whatever nginx left was killed with its term: nothing serves the port.
    assert!(
        TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_err(),
        "nginx still serves"
    );
}
