//! [`RestoreMeter`]: progress of restoring a task's stores.
//!
//! While a task restores, `weir_restoring_tasks` counts it (the HTTP server
//! reports the instance not ready); per store the meter sets the records
//! still to read when the restore of the store starts, and updates the
//! restored records, remaining records and rate once at least
//! [`RestoreMeter::STEP`] records were applied since the last update (the
//! restore reports whole batches) and at the end. The rate gauge keeps the
//! last restore's rate once it finished.

use std::sync::Arc;
use std::time::Instant;

use prometheus::{Gauge, IntCounter, IntGauge};

use super::Metrics;

/// Restore progress of one task; dropping it ends the task's restoring phase.
pub struct RestoreMeter {
    metrics: Arc<Metrics>,
    task: String,
    store: Option<StoreProgress>,
}

struct StoreProgress {
    restored: IntCounter,
    remaining: IntGauge,
    rate: Gauge,
    started: Instant,
    done: u64,
    published: u64,
    total: u64,
}

impl RestoreMeter {
    /// Records published at most this often while restoring.
    pub const STEP: u64 = 1000;

    /// Task `task` starts restoring.
    pub fn start(metrics: Arc<Metrics>, task: String) -> Self {
        metrics.restoring_tasks.inc();
        RestoreMeter {
            metrics,
            task,
            store: None,
        }
    }

    /// Restoring `store` begins with `remaining` changelog records to read.
    pub fn store_started(&mut self, store: &str, remaining: u64) {
        self.finish_store();
        let labels = [self.task.as_str(), store];
        let progress = StoreProgress {
            restored: self.metrics.restore_restored.with_label_values(&labels),
            remaining: self.metrics.restore_remaining.with_label_values(&labels),
            rate: self.metrics.restore_rate.with_label_values(&labels),
            started: Instant::now(),
            done: 0,
            published: 0,
            total: remaining,
        };
        progress.remaining.set(remaining as i64);
        self.store = Some(progress);
    }

    /// One more record of the current store was applied.
    #[inline]
    pub fn record(&mut self) {
        self.records(1);
    }

    /// `n` more records of the current store were applied (one batch).
    #[inline]
    pub fn records(&mut self, n: u64) {
        if let Some(p) = self.store.as_mut() {
            p.done += n;
            if p.done - p.published >= Self::STEP {
                p.publish();
            }
        }
    }

    /// The current store is restored.
    pub fn finish_store(&mut self) {
        if let Some(mut p) = self.store.take() {
            p.publish();
            p.remaining.set(0);
        }
    }
}

impl StoreProgress {
    fn publish(&mut self) {
        self.restored.inc_by(self.done - self.published);
        self.published = self.done;
        self.remaining
            .set(self.total.saturating_sub(self.done) as i64);
        let secs = self.started.elapsed().as_secs_f64();
        if secs > 0.0 {
            self.rate.set(self.done as f64 / secs);
        }
    }
}

impl Drop for RestoreMeter {
    fn drop(&mut self) {
        self.finish_store();
        self.metrics.restoring_tasks.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_published_in_steps_and_restoring_ends_on_drop() {
        let metrics = Arc::new(Metrics::new("app"));
        let mut meter = RestoreMeter::start(metrics.clone(), "0_1".into());
        assert_eq!(metrics.restoring_tasks(), 1);
        meter.store_started("counts", 2500);
        let remaining = metrics
            .restore_remaining
            .with_label_values(&["0_1", "counts"]);
        let restored = metrics
            .restore_restored
            .with_label_values(&["0_1", "counts"]);
        for _ in 0..1500 {
            meter.record();
        }
        assert_eq!(restored.get(), 1000);
        assert_eq!(remaining.get(), 1500);
        drop(meter);
        assert_eq!(restored.get(), 1500);
        assert_eq!(remaining.get(), 0);
        assert_eq!(metrics.restoring_tasks(), 0);
    }
}
