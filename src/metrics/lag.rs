//! [`LagMeter`]: consumer lag per partition from librdkafka statistics.
//!
//! librdkafka emits a statistics document every `statistics.interval.ms`
//! (Weir sets 5,000 ms on the group consumers; `consumer.statistics.interval.ms`
//! overrides it) and rdkafka hands it to the consumer context's `stats`
//! callback, on the stream thread inside `poll`. For every partition the
//! consumer has been assigned (`desired`), the lag is the partition's end —
//! the last stable offset (`ls_offset`, which under `read_committed` is where
//! a reader can get to) or else the high watermark — minus the consumer's
//! position (`app_offset`: one past the last record handed to Weir; before
//! the first record, the committed offset). librdkafka's own `consumer_lag`
//! is not used: it is measured from the consumer's committed offset, which
//! under exactly-once is committed through the producer's transaction and
//! never seen by the consumer's statistics.
//!
//! Series of partitions this consumer no longer reports are removed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rdkafka::statistics::{Partition, Statistics};

use super::Metrics;

/// Lag bookkeeping of one consumer; see the module docs.
pub struct LagMeter {
    metrics: Arc<Metrics>,
    /// (topic, partition) series this consumer set at its last statistics.
    reported: Mutex<BTreeSet<(String, i32)>>,
}

impl LagMeter {
    /// A meter for one consumer of the instance.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        LagMeter {
            metrics,
            reported: Mutex::new(BTreeSet::new()),
        }
    }

    /// Updates the lag series from one statistics document.
    pub fn update(&self, statistics: &Statistics) {
        let mut now = BTreeSet::new();
        let at = std::time::Instant::now();
        let mut seen = self
            .metrics
            .lag_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (topic, t) in &statistics.topics {
            for p in t.partitions.values() {
                if let Some((lag, end)) = partition_lag(p) {
                    let partition = p.partition.to_string();
                    self.metrics
                        .consumer_lag
                        .with_label_values(&[topic.as_str(), partition.as_str()])
                        .set(lag);
                    seen.insert((topic.clone(), p.partition), (lag, end, at));
                    now.insert((topic.clone(), p.partition));
                }
            }
        }
        let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, partition) in reported.difference(&now) {
            seen.remove(&(topic.clone(), *partition));
            let _ = self
                .metrics
                .consumer_lag
                .remove_label_values(&[topic.as_str(), partition.to_string().as_str()]);
        }
        *reported = now;
    }
}

/// The lag and the end offset of one partition of a consumer's
/// statistics, when known.
fn partition_lag(p: &Partition) -> Option<(i64, i64)> {
    if p.partition < 0 || !p.desired {
        return None;
    }
    let end = if p.ls_offset >= 0 {
        p.ls_offset
    } else {
        p.hi_offset
    };
    let position = if p.app_offset >= 0 {
        p.app_offset
    } else {
        p.committed_offset
    };
    (end >= 0 && position >= 0).then(|| ((end - position).max(0), end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(app_offset: i64, committed_offset: i64, ls_offset: i64) -> Partition {
        Partition {
            partition: 3,
            desired: true,
            app_offset,
            committed_offset,
            hi_offset: 100,
            ls_offset,
            ..Partition::default()
        }
    }

    #[test]
    fn lag_is_last_stable_offset_minus_position() {
        assert_eq!(partition_lag(&partition(40, -1001, 90)), Some((50, 90)));
        assert_eq!(partition_lag(&partition(-1001, 10, 90)), Some((80, 90)));
        assert_eq!(
            partition_lag(&partition(-1001, -1001, 90)),
            None,
            "no position"
        );
        assert_eq!(partition_lag(&partition(95, -1001, -1)), Some((5, 100)));
        let revoked = Partition {
            desired: false,
            ..partition(40, -1001, 90)
        };
        assert_eq!(partition_lag(&revoked), None);
    }
}
