//! What a test asks a running host over HTTP, whichever way it runs (a process or in-process):
//! `/status` in the host's own types, a role, a plugin's entry, `/metrics`.

use std::fmt::Display;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, ensure};

use crate::eventually::{eventually, when};
use crate::status::{PluginStatus, Role, Status, StatusExt};

/// A host's HTTP endpoint.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The address the host bound.
    addr: SocketAddr,
    /// Bounded, so a host that stopped answering fails a request instead of hanging a test.
    client: reqwest::Client,
}

impl Endpoint {
    /// The endpoint at `addr`.
    pub fn new(addr: SocketAddr) -> anyhow::Result<Endpoint> {
        Ok(Endpoint {
            addr,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
        })
    }

    /// The HTTP address the host bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET /status`, read into the host's own types.
    pub async fn status(&self) -> anyhow::Result<Status> {
        let body = self
            .client
            .get(format!("http://{}/status", self.addr))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        crate::status::parse(&body)
    }

    /// `GET path`: the status code and the body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let response = self
            .client
            .get(format!("http://{}{path}", self.addr))
            .send()
            .await?;
        let code = response.status().as_u16();
        Ok((code, response.text().await?))
    }

    /// Waits up to `timeout` until each of `replicas` (the names their ids begin with) holds
    /// `lease` or has a place in its line, as this host's `/status` shows them. A replica's first
    /// campaign places it, so this is the moment a standby has campaigned once.
    pub async fn wait_placed(
        &self,
        lease: &str,
        replicas: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<()> {
        eventually(
            format!("{replicas:?} holding {lease} or in its line (/status)"),
            timeout,
            async || {
                let status = self.status().await.map_err(|e| format!("{e:#}"))?;
                let entry = status.lease(lease).ok_or("no such lease in /status")?;
                let placed: Vec<&str> = entry
                    .line
                    .iter()
                    .map(|w| w.holder.as_str())
                    .chain(entry.holder.as_deref())
                    .collect();
                let all = replicas
                    .iter()
                    .all(|n| placed.iter().any(|h| h.starts_with(&format!("{n}-"))));
                if all {
                    Ok(())
                } else {
                    Err(format!("holder {:?}, line {:?}", entry.holder, entry.line))
                }
            },
        )
        .await
    }

    /// The role of `lease` in `/status`, or `None` if the host does not answer.
    pub async fn role(&self, lease: &str) -> Option<Role> {
        let status = self.status().await.ok()?;
        status.lease(lease).map(|l| l.role)
    }

    /// The `/status` entry of plugin `name`, or `None` if there is none or the host does not
    /// answer.
    pub async fn plugin_status(&self, name: &str) -> Option<PluginStatus> {
        let status = self.status().await.ok()?;
        status.plugin(name).cloned()
    }

    /// Polls `/status` up to `timeout` until plugin `name` has an entry for which `ok` holds, and
    /// returns that entry; a timeout names `what` and the last entry seen.
    pub async fn wait_for_plugin(
        &self,
        name: &str,
        what: impl Display,
        timeout: Duration,
        ok: impl Fn(&PluginStatus) -> bool,
    ) -> anyhow::Result<PluginStatus> {
        let seen = eventually(what, timeout, async || {
            when(self.plugin_status(name).await, |s| {
                s.as_ref().is_some_and(&ok)
            })
        })
        .await?;
        seen.context("no entry")
    }

    /// `GET /metrics`: the text exposition.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let (code, body) = self.get("/metrics").await?;
        ensure!(code == 200, "/metrics answered {code}: {body}");
        Ok(body)
    }
}

impl AsRef<Endpoint> for Endpoint {
    fn as_ref(&self) -> &Endpoint {
        self
    }
}

/// The value of the sample `series` (a metric name with its labels, as exposed) in a text
/// exposition, or `None` when absent.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.trim().parse().ok())
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sample_is_found_by_its_whole_series() {
        let text = "# HELP x\nleasehold_plugin_calls_total{plugin=\"a\"} 3\nleasehold_plugin_calls_total{plugin=\"ab\"} 5\n";
        assert_eq!(
            super::sample(text, "leasehold_plugin_calls_total{plugin=\"a\"}"),
            Some(3.0)
        );
        assert_eq!(super::sample(text, "leasehold_plugin_traps_total"), None);
    }
}
