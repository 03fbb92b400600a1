//! Restoring an active task's stores from their changelog topics.
//!
//! A store remembers the changelog offset its committed state reflects
//! ([`crate::state::StateStore::committed_offset`]). Restoration therefore
//! reads only the tail: from that offset + 1 (or the start of the log for a
//! new store) to the end, with `read_committed`, so records of aborted
//! transactions never enter a store. The reading is the shared changelog
//! reader's (`changelog/`: where to start, batches through `restore_batch`,
//! commits, the end, the timeout); this file reads a task's stores one after
//! the other, reports progress to the [`RestoreMeter`] and fails when a
//! store is ahead of its changelog (the changelog was deleted or reset while
//! the local state stayed: remove the local state).

use std::time::Duration;

use super::StreamsError;
use super::changelog::{ChangelogReader, ChangelogSource, KafkaChangelog, Plan, ReadMode};
use super::end_of_partition::RestoreConsumer;
use crate::metrics::RestoreMeter;
use crate::processor::TaskInstance;
use crate::state::StoreError;

/// What one restoration did, for logs and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Changelog records applied.
    pub restored: u64,
    /// Records in the changelog partitions (high watermark − low watermark),
    /// summed over the task's stores: what a full restore would have read.
    pub changelog_size: u64,
}

/// Restores every logged store of `task` (still `Created`) from partition
/// `task.id().partition` of its changelog, reporting progress to `meter`.
/// Reading one store's changelog longer than `timeout` fails with
/// [`StreamsError::Timeout`].
pub(crate) fn restore_task(
    task: &mut TaskInstance,
    consumer: &RestoreConsumer,
    timeout: Duration,
    meter: &mut RestoreMeter,
) -> Result<RestoreStats, StreamsError> {
    restore_stores(task, KafkaChangelog::new(consumer), timeout, Some(meter))
}

/// Restores every logged store of `task` from `source`, one store at a time.
pub(crate) fn restore_stores<S: ChangelogSource>(
    task: &mut TaskInstance,
    source: S,
    timeout: Duration,
    mut meter: Option<&mut RestoreMeter>,
) -> Result<RestoreStats, StreamsError> {
    let id = task.id();
    let changelogs: Vec<(String, String)> = task
        .changelog_topics()
        .map(|(s, t)| (s.to_string(), t.to_string()))
        .collect();
    let mut reader = ChangelogReader::new(source, ReadMode::ToEnd);
    let mut stats = RestoreStats::default();
    for (store, topic) in &changelogs {
        let committed = task.store_committed_offset(store);
        let found = reader.register(
            id,
            store,
            (topic.as_str(), id.partition),
            committed,
            timeout,
        )?;
        stats.changelog_size += (found.high - found.low).max(0) as u64;
        let from = match found.plan {
            Plan::ReadFrom(from) => from,
            Plan::UpToDate => continue,
            Plan::AheadOfLog { committed, high } => {
                return Err(StreamsError::Store(StoreError::Corrupt {
                    store: store.clone(),
                    message: format!(
                        "the local store of task {id} reflects changelog offset {committed}, but {topic}/{} ends at {high}; the changelog was deleted or reset: remove the local state (weir reset) and restart",
                        id.partition
                    ),
                }));
            }
        };
        if let Some(meter) = meter.as_deref_mut() {
            meter.store_started(store, (found.high - from) as u64);
        }
        stats.restored += reader.read_to_end(task, timeout, |n| {
            if let Some(meter) = meter.as_deref_mut() {
                meter.records(n);
            }
        })?;
        if let Some(meter) = meter.as_deref_mut() {
            meter.finish_store();
        }
    }
    Ok(stats)
}
