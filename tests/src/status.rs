//! `/status` read into the host's own types, so a test reads exactly what the host writes and a
//! renamed field breaks the build, not a `Value` lookup that quietly yields `null`.

pub use leasehold::http::{LeaseStatus, Status};
pub use leasehold::lease::Role;
pub use leasehold::runtime::World;
pub use leasehold::supervisor::{PluginState, PluginStatus};

/// Parses a `/status` body.
pub fn parse(body: &[u8]) -> anyhow::Result<Status> {
    serde_json::from_slice(body).map_err(|e| {
        anyhow::anyhow!(
            "/status is not what the host's Status type reads: {e}: {}",
            String::from_utf8_lossy(body)
        )
    })
}

/// Lookups by name in a [`Status`].
pub trait StatusExt {
    /// The entry of lease `name`.
    fn lease(&self, name: &str) -> Option<&LeaseStatus>;
    /// The entry of plugin `name`.
    fn plugin(&self, name: &str) -> Option<&PluginStatus>;
}

impl StatusExt for Status {
    fn lease(&self, name: &str) -> Option<&LeaseStatus> {
        self.leases.iter().find(|l| l.name == name)
    }

    fn plugin(&self, name: &str) -> Option<&PluginStatus> {
        self.plugins.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_status_body_as_the_host_writes_it() {
        let body = br#"{"replica":"a-1","store":"sqlite","leases":[{"name":"leader","role":"leader","holder":"a-1","epoch":3,"expires_in_ms":1200}],"plugins":[{"name":"p","lease":"leader","world":"health-check","state":"backoff","last_error":null,"calls":2,"traps":0,"refused_writes":0,"fuel_last_call":null,"fuel_total":0}]}"#;
        let status = parse(body).unwrap();
        assert_eq!(status.store, "sqlite");
        let lease = status.lease("leader").unwrap();
        assert_eq!(
            (lease.role, lease.epoch.map(|e| e.get())),
            (Role::Leader, Some(3))
        );
        let plugin = status.plugin("p").unwrap();
        assert_eq!(plugin.world, Some(World::HealthCheck));
        assert_eq!(plugin.state, PluginState::Backoff);
        assert!(status.plugin("q").is_none());
    }
}
