//! A sharded reconciler: bound to a lease group, one instance runs per shard its replica holds.
//! Each instance counts its shard's work in a checkpoint kept in `kv` under `checkpoint/INDEX`, so
//! the replica that holds the shard next carries on from where the last one stopped (the lease
//! group's "checkpoint continuity"). Every write is fenced by the shard's lease: a replica that
//! has lost the shard cannot move its checkpoint any more.
//!
//! Config: `batch` (default `1`): how much each reconcile adds.

use leasehold_guest::{Config, Context, Error, Outcome, Reconciler, info, kv, lease};

struct Counter {
    /// The checkpoint's key: `checkpoint/INDEX`.
    key: String,
    /// The shard, as `INDEX/COUNT`, for the log.
    shard: String,
    /// How much each reconcile adds.
    batch: u64,
    /// The checkpoint as last read or written by this instance.
    count: Option<u64>,
}

impl Reconciler for Counter {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["batch"])?;
        let batch = config
            .get_or("batch", "1")
            .parse()
            .map_err(|_| "batch must be a whole number".to_string())?;
        let shard = lease::shard()
            .ok_or("bind this plugin to a lease group: group = \"NAME\" in its manifest")?;
        Ok(Counter {
            key: format!("checkpoint/{}", shard.index),
            shard: format!("{}/{}", shard.index, shard.count),
            batch,
            count: None,
        })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        let count = match self.count {
            Some(count) => count,
            None => {
                // First reconcile of this term: carry on from the last holder's checkpoint.
                let stored = kv::get_string(&self.key)?;
                let (count, by) = match stored.as_deref().and_then(|s| s.split_once(' ')) {
                    Some((count, by)) => {
                        (count.parse().map_err(|_| "bad checkpoint")?, by.to_string())
                    }
                    None => (0, "nobody".to_string()),
                };
                info!(
                    "shard {} resumes from checkpoint {count} written by {by} (epoch {})",
                    self.shard,
                    ctx.epoch()
                );
                count
            }
        };
        let next = count + self.batch;
        kv::put(&self.key, format!("{next} {}", lease::holder()))?;
        self.count = Some(next);
        info!("shard {} checkpoint {next}", self.shard);
        Ok(Outcome::default())
    }
}

leasehold_guest::export_reconciler!(Counter);
