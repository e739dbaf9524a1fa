//! A client of the lease API's watch stream (`GET /v1/leases/NAME/watch`) for tests and the
//! watcher benchmark: Server-Sent Events read off one reqwest response, each event with the
//! moment it arrived.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use tokio::time::Instant;

/// One event as it arrived.
#[derive(Debug, Clone)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent, as the SSE spec has it).
    pub event: String,
    /// The `id:` field, when the event had one.
    pub id: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// When it arrived, by the wall clock (to compare with the host's `at_ms`).
    pub received: SystemTime,
    /// When it arrived, by the monotonic clock.
    pub received_at: Instant,
}

impl SseEvent {
    /// The data as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.data)
            .with_context(|| format!("event {} data is not JSON: {:?}", self.event, self.data))
    }

    /// A field of the data, as JSON.
    pub fn field(&self, name: &str) -> serde_json::Value {
        self.json()
            .ok()
            .and_then(|v| v.get(name).cloned())
            .unwrap_or_default()
    }

    /// When it arrived, in ms since the Unix epoch.
    pub fn received_ms(&self) -> u64 {
        self.received
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// An open watch stream.
#[derive(Debug)]
pub struct Watch {
    /// The response whose body is the stream.
    response: reqwest::Response,
    /// Bytes read and not yet split into events.
    buffer: String,
}

impl Watch {
    /// Opens `/v1/leases/LEASE/watch` on `addr`, with `last_event_id` when given; fails unless
    /// the answer is 200 with an event stream.
    pub async fn open(
        addr: SocketAddr,
        lease: &str,
        last_event_id: Option<&str>,
    ) -> anyhow::Result<Watch> {
        Self::open_from(None, addr, lease, last_event_id).await
    }

    /// [`Watch::open`] from the local address `from` (any of 127.0.0.0/8 reaches a host on
    /// 127.0.0.1), the system's choice when `None`.
    pub async fn open_from(
        from: Option<IpAddr>,
        addr: SocketAddr,
        lease: &str,
        last_event_id: Option<&str>,
    ) -> anyhow::Result<Watch> {
        let (status, response) = Self::request_from(from, addr, lease, last_event_id, None).await?;
        if status != 200 {
            bail!(
                "watch of {lease} on {addr}: {status} {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(Watch {
            response,
            buffer: String::new(),
        })
    }

    /// The raw answer to a watch request, whatever its status, with `accept` when given.
    pub async fn request(
        addr: SocketAddr,
        lease: &str,
        last_event_id: Option<&str>,
        accept: Option<&str>,
    ) -> anyhow::Result<(u16, reqwest::Response)> {
        Self::request_from(None, addr, lease, last_event_id, accept).await
    }

    /// [`Watch::request`] from the local address `from`, the system's choice when `None`.
    pub async fn request_from(
        from: Option<IpAddr>,
        addr: SocketAddr,
        lease: &str,
        last_event_id: Option<&str>,
        accept: Option<&str>,
    ) -> anyhow::Result<(u16, reqwest::Response)> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .local_address(from)
            .build()?;
        let mut request = client.get(format!("http://{addr}/v1/leases/{lease}/watch"));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        if let Some(accept) = accept {
            request = request.header("Accept", accept);
        }
        let response = request.send().await?;
        Ok((response.status().as_u16(), response))
    }

    /// The next event within `within`; an error when the stream ends or stays silent that long.
    pub async fn next(&mut self, within: Duration) -> anyhow::Result<SseEvent> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(at) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..at + 2).collect();
                if let Some(event) = parse(&block) {
                    return Ok(event);
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .with_context(|| format!("no event within {within:?}"))??;
            match chunk {
                Some(bytes) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                None => bail!("the stream ended"),
            }
        }
    }

    /// Reads the stream on a task of its own, stamping each event as it arrives (a stream read
    /// only when a test gets to it stamps late what waited in its buffer); the events come on the
    /// channel, which closes when the stream ends.
    pub fn follow(mut self) -> Followed {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(event) = self.next(Duration::from_secs(3600)).await {
                if tx.send(event).is_err() {
                    break;
                }
            }
        });
        Followed { events: rx }
    }
}

/// One event block, stamped now; `None` for a block of comments alone.
fn parse(block: &str) -> Option<SseEvent> {
    let (mut event, mut id, mut data) = (None, None, Vec::new());
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_string()),
            "id" => id = Some(value.to_string()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if event.is_none() && data.is_empty() {
        return None;
    }
    Some(SseEvent {
        event: event.unwrap_or_else(|| "message".into()),
        id,
        data: data.join("\n"),
        received: SystemTime::now(),
        received_at: Instant::now(),
    })
}

/// A stream read on a task of its own ([`Watch::follow`]).
#[derive(Debug)]
pub struct Followed {
    /// The events, stamped as they arrived.
    events: tokio::sync::mpsc::UnboundedReceiver<SseEvent>,
}

impl Followed {
    /// Events until one named `kind` (returned with those before it), within `within`.
    pub async fn until(
        &mut self,
        kind: &str,
        within: Duration,
    ) -> anyhow::Result<(SseEvent, Vec<SseEvent>)> {
        let deadline = Instant::now() + within;
        let mut before = Vec::new();
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .with_context(|| format!("no {kind} within {within:?}; before it: {before:?}"))?
                .with_context(|| {
                    format!("the stream ended before {kind}; before it: {before:?}")
                })?;
            if event.event == kind {
                return Ok((event, before));
            }
            before.push(event);
        }
    }
}
