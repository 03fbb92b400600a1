//! Restoring an active task's stores from their changelog topics.
//!
//! A store remembers the changelog offset its committed state reflects
//! ([`crate::state::StateStore::committed_offset`]). Restoration therefore
//! reads only the tail: from that offset + 1 (or the start of the log for a
//! new store) to the end, with `read_committed`, so records of aborted
//! transactions never enter a store. The reading is the shared changelog
//! reader's (`changelog/`: where to start, batches through `restore_batch`,
//! commits, the end); a store ahead of its changelog fails (the changelog
//! was deleted or reset while the local state stayed: the task is
//! corrupt).
//!
//! The stream thread restores in slices ([`SlicedRestore`]): each call reads
//! for at most a [`RestoreBudget`] of time and records, then returns, so the
//! thread polls and processes its running tasks in between and a restore of
//! any size never blocks `poll`. One store is read at a time (the restore
//! consumer reports partition ends by partition number only); its progress
//! lives in the store's committed offset, so a restore that is stopped (a
//! rebalance, a crash) resumes where it was.
//!
//! [`restore_stores`] reads a task's stores to the end in one call (the
//! test driver's restarts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::StreamsError;
use super::changelog::{ChangelogReader, ChangelogSource, KafkaChangelog, Plan, ReadMode};
use super::end_of_partition::RestoreConsumer;
use crate::metrics::RestoreMeter;
use crate::processor::{TaskId, TaskInstance};
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
                return Err(ahead_of_log(id, store, topic, committed, high));
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

/// The error of a store that reflects changelog offset `committed` while
/// its changelog ends at `high`.
fn ahead_of_log(id: TaskId, store: &str, topic: &str, committed: i64, high: i64) -> StreamsError {
    StreamsError::Store(StoreError::Corrupt {
        store: store.to_string(),
        message: format!(
            "the local store of task {id} reflects changelog offset {committed}, but {topic}/{} ends at {high}; the changelog was deleted or reset: remove the local state (weir reset) and restart",
            id.partition
        ),
    })
}

/// How long the changelog may deliver nothing while a store is behind
/// before restoring fails with [`StreamsError::Timeout`].
pub(crate) const RESTORE_STALL_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest one wait for changelog records within a slice.
const SLICE_POLL: Duration = Duration::from_millis(100);

/// What one restore slice may spend: wall time and records.
#[derive(Debug)]
pub(crate) struct RestoreBudget {
    deadline: Instant,
    records: u64,
}

impl RestoreBudget {
    /// A slice of at most `time` and `records`, from now.
    pub(crate) fn new(time: Duration, records: u64) -> Self {
        RestoreBudget {
            deadline: Instant::now() + time,
            records,
        }
    }

    /// Whether the slice is used up.
    pub(crate) fn spent(&self) -> bool {
        self.records == 0 || Instant::now() >= self.deadline
    }

    fn take(&mut self, records: u64) {
        self.records = self.records.saturating_sub(records);
    }

    /// How long the next wait for records may be.
    fn wait(&self) -> Duration {
        SLICE_POLL.min(self.deadline.saturating_duration_since(Instant::now()))
    }
}

/// The store of one task being read now.
struct StoreRead {
    task: TaskId,
    reader: ChangelogReader<KafkaChangelog>,
    last_progress: Instant,
}

/// A task waiting for, or in, restoration: its meter (which counts it in
/// `weir_restoring_tasks` from the moment it is queued) and progress.
struct Queued {
    meter: RestoreMeter,
    /// Stores (of `changelog_topics`) already current.
    stores_done: usize,
    /// Stores whose changelog size is in `stats` (a store read again after
    /// the task was set aside is not counted twice).
    stores_sized: usize,
    stats: RestoreStats,
    started: Instant,
}

/// Restores the tasks of one stream thread in slices; see the module docs.
pub(crate) struct SlicedRestore {
    consumer: Arc<RestoreConsumer>,
    queued: std::collections::HashMap<TaskId, Queued>,
    current: Option<StoreRead>,
}

impl SlicedRestore {
    /// Restores through `consumer` (outside the group, `read_committed`).
    pub(crate) fn new(consumer: RestoreConsumer) -> Self {
        SlicedRestore {
            consumer: Arc::new(consumer),
            queued: Default::default(),
            current: None,
        }
    }

    /// Task `id` will be restored; `meter` reports its progress.
    pub(crate) fn queue(&mut self, id: TaskId, meter: RestoreMeter) {
        let queued = Queued {
            meter,
            stores_done: 0,
            stores_sized: 0,
            stats: RestoreStats::default(),
            started: Instant::now(),
        };
        self.queued.insert(id, queued);
    }

    /// Restores `task` (queued) within `budget`: true once every store is
    /// current (the task leaves the queue), false when the budget ran out
    /// first.
    pub(crate) fn restore(
        &mut self,
        task: &mut TaskInstance,
        budget: &mut RestoreBudget,
    ) -> Result<bool, StreamsError> {
        let id = task.id();
        if self.current.as_ref().is_some_and(|c| c.task != id) {
            // Another task's read was left open: its store committed what
            // it applied, so it resumes from there later.
            self.current = None;
        }
        loop {
            if self.current.is_none() && !self.start_next_store(task)? {
                if let Some(q) = self.queued.remove(&id)
                    && q.stats.changelog_size > 0
                {
                    tracing::info!(
                        task = %id,
                        restored = q.stats.restored,
                        changelog_records = q.stats.changelog_size,
                        elapsed_ms = q.started.elapsed().as_millis() as u64,
                        "restored task"
                    );
                }
                return Ok(true);
            }
            let read = self.current.as_mut().expect("a store is being read");
            if read.reader.is_done() {
                read.reader.commit(task)?;
                read.reader.stop()?;
                self.current = None;
                if let Some(q) = self.queued.get_mut(&id) {
                    q.meter.finish_store();
                    q.stores_done += 1;
                }
                continue;
            }
            if budget.spent() {
                return Ok(false);
            }
            if read.last_progress.elapsed() >= RESTORE_STALL_TIMEOUT {
                return Err(StreamsError::Timeout {
                    context: format!(
                        "restoring task {id}: no changelog record arrived; is the broker reachable?"
                    ),
                    after: RESTORE_STALL_TIMEOUT,
                });
            }
            read.reader.fetch(budget.wait())?;
            let applied = read.reader.apply(task)?;
            if applied > 0 {
                read.last_progress = Instant::now();
                budget.take(applied);
                if let Some(q) = self.queued.get_mut(&id) {
                    q.meter.records(applied);
                    q.stats.restored += applied;
                }
            }
        }
    }

    /// Registers the next store of `task` that is behind its changelog and
    /// starts reading it; false when every store is current.
    fn start_next_store(&mut self, task: &TaskInstance) -> Result<bool, StreamsError> {
        let id = task.id();
        let Some(q) = self.queued.get_mut(&id) else {
            return Ok(false);
        };
        let changelogs: Vec<(String, String)> = task
            .changelog_topics()
            .skip(q.stores_done)
            .map(|(s, t)| (s.to_string(), t.to_string()))
            .collect();
        for (store, topic) in changelogs {
            let source = KafkaChangelog::new(self.consumer.clone());
            let mut reader = ChangelogReader::new(source, ReadMode::ToEnd);
            let committed = task.store_committed_offset(&store);
            let found = reader.register(
                id,
                &store,
                (topic.as_str(), id.partition),
                committed,
                RESTORE_STALL_TIMEOUT,
            )?;
            if q.stores_done >= q.stores_sized {
                q.stats.changelog_size += (found.high - found.low).max(0) as u64;
                q.stores_sized = q.stores_done + 1;
            }
            match found.plan {
                Plan::ReadFrom(from) => {
                    q.meter.store_started(&store, (found.high - from) as u64);
                    reader.start()?;
                    self.current = Some(StoreRead {
                        task: id,
                        reader,
                        last_progress: Instant::now(),
                    });
                    return Ok(true);
                }
                Plan::UpToDate => q.stores_done += 1,
                Plan::AheadOfLog { committed, high } => {
                    return Err(ahead_of_log(id, &store, &topic, committed, high));
                }
            }
        }
        Ok(false)
    }

    /// Stops restoring task `id` (it closes): commits what its store read
    /// applied and forgets it.
    pub(crate) fn forget(&mut self, task: &mut TaskInstance) {
        let id = task.id();
        if let Some(mut read) = self.current.take_if(|c| c.task == id) {
            if let Err(e) = read.reader.commit(task) {
                tracing::warn!(task = %id, error = %e, "committing restore progress failed");
            }
            let _ = read.reader.stop();
        }
        self.queued.remove(&id);
    }
}
