//! The figures of OS processes bound to leases (`leasehold exec`, `[[process]]`), one series per
//! process and lease it runs under (a process bound to a group runs under each shard held).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use std::sync::Arc;

use crate::metrics::{FloatGauge, LabelText};

/// Labels of a per-process metric.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProcessLabel {
    /// The process's name (`name` of its table, or its command's file name).
    pub process: LabelText,
    /// The lease it runs under.
    pub lease: LabelText,
}

/// Labels of a count of a process's exits.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ProcessEndLabel {
    /// The process's name.
    pub process: LabelText,
    /// The lease it runs under.
    pub lease: LabelText,
    /// How it ended: `code N` or `signal NAME`.
    pub ended: LabelText,
}

/// Every per-process metric.
#[derive(Debug, Default)]
pub struct ProcessMetrics {
    /// Starts of the process.
    pub(crate) starts: Family<ProcessLabel, Counter>,
    /// Exits, by how the process ended.
    pub(crate) exits: Family<ProcessEndLabel, Counter>,
    /// Stops that needed SIGKILL of the tree: the grace ran out, or the deadline came.
    pub(crate) forced_kills: Family<ProcessLabel, Counter>,
    /// Stops its keeper made on its own, on its own clock: the lease's deadline came without a
    /// later one (this host frozen, or its renewals failing), or this host was gone.
    pub(crate) keeper_stops: Family<ProcessLabel, Counter>,
    /// Stops the host could not confirm before the term's deadline: the tree's end was not
    /// reported (its keeper was lost) or came later than the deadline.
    pub(crate) unconfirmed_stops: Family<ProcessLabel, Counter>,
    /// How long the last stop took, from the stop signal to no process of the tree left.
    pub(crate) last_stop_seconds: Family<ProcessLabel, FloatGauge>,
    /// 1 while the process runs here.
    pub(crate) running: Family<ProcessLabel, Gauge>,
}

impl ProcessMetrics {
    /// The labels of `process` under `lease`.
    pub(crate) fn label(process: &str, lease: &str) -> ProcessLabel {
        ProcessLabel {
            process: process.into(),
            lease: lease.into(),
        }
    }

    /// The labels of an exit of `process` under `lease`, ended as `ended` says.
    pub(crate) fn end_label(process: &str, lease: &str, ended: &str) -> ProcessEndLabel {
        ProcessEndLabel {
            process: process.into(),
            lease: lease.into(),
            ended: ended.into(),
        }
    }

    /// Every per-process metric, empty and not yet registered.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Registers every family with `registry`, in the order `/metrics` lists them.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leasehold_process_starts",
            "Starts of an OS process bound to a lease",
            self.starts.clone(),
        );
        registry.register(
            "leasehold_process_exits",
            "Exits of an OS process bound to a lease, by how it ended (code N, signal NAME)",
            self.exits.clone(),
        );
        registry.register(
            "leasehold_process_forced_kills",
            "Stops of a process that needed SIGKILL of its tree (the grace ran out, or the lease's deadline came)",
            self.forced_kills.clone(),
        );
        registry.register(
            "leasehold_process_keeper_stops",
            "Stops of a process (or a service's deactivate) its keeper made on its own at the lease's deadline, the host not having stopped it (frozen, or renewals failing)",
            self.keeper_stops.clone(),
        );
        registry.register(
            "leasehold_process_unconfirmed_stops",
            "Stops the host could not confirm before the lease's deadline",
            self.unconfirmed_stops.clone(),
        );
        registry.register(
            "leasehold_process_last_stop_seconds",
            "How long the process's last stop took, from its stop signal to no process of its tree left",
            self.last_stop_seconds.clone(),
        );
        registry.register(
            "leasehold_process_running",
            "1 while the process runs on this replica",
            self.running.clone(),
        );
    }
}
