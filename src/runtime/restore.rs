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
//! any size never blocks `poll`. The restoring tasks are read together, one
//! store of each at a time, through one assignment of the restore consumer
//! that lasts across slices (librdkafka keeps fetching ahead for all of
//! them); the assignment changes only when a store is done or a task comes
//! or goes. A store's progress lives in its committed offset, so a restore
//! that is stopped (a rebalance, a crash) resumes where it was.
//!
//! Stores far behind their changelog (more than [`LARGE_BACKLOG`] records)
//! are read one at a time, the one least behind first, while the short
//! ones are read alongside: the thread's restore throughput is the same
//! either way, so reading four long stores together made all four tasks
//! wait for the last record of all four, where in turn the first resumes
//! processing after a quarter of the time, the next after half, and the
//! last no later than before.
//!
//! [`restore_stores`] reads a task's stores to the end in one call (the
//! test driver's restarts).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::StreamsError;
use super::changelog::{
    ChangelogPartition, ChangelogReader, ChangelogSource, KafkaChangelog, Plan, ReadMode,
    RestoreTarget,
};
use super::end_of_partition::RestoreConsumer;
use crate::metrics::RestoreMeter;
use crate::processor::{TaskId, TaskInstance};
use crate::state::{ChangelogRecord, StoreError};

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
/// Changelog records behind above which a store is read alone among the
/// long ones (see the module docs): about 50 ms of a restore on one thread.
pub(crate) const LARGE_BACKLOG: i64 = 100_000;
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

/// A restore slice that failed: the error, and the task it is about when it
/// is one task's (registering or writing one of its stores) rather than the
/// changelog reading's as a whole.
#[derive(Debug)]
pub(crate) struct RestoreFailure {
    /// The task whose store failed, if it was one task's.
    pub(crate) task: Option<TaskId>,
    pub(crate) error: StreamsError,
}

impl RestoreFailure {
    fn of(task: TaskId, error: StreamsError) -> Self {
        RestoreFailure {
            task: Some(task),
            error,
        }
    }

    fn reading(error: StreamsError) -> Self {
        RestoreFailure { task: None, error }
    }
}

/// A task waiting for, or in, restoration: its meter (which counts it in
/// `weir_restoring_tasks` from the moment it is queued) and progress.
struct Queued {
    meter: RestoreMeter,
    /// Stores (of `changelog_topics`) already current.
    stores_done: usize,
    /// Stores whose changelog size is in `stats` (a store read again after
    /// it was set aside is not counted twice).
    stores_sized: usize,
    stats: RestoreStats,
    started: Instant,
    /// Its next store was found far behind while another long store was
    /// read: it waits for that one to finish.
    waiting: bool,
}

/// Restores the tasks of one stream thread in slices; see the module docs.
pub(crate) struct SlicedRestore {
    queued: std::collections::HashMap<TaskId, Queued>,
    /// The store partitions being read, one store of each task at most.
    reader: ChangelogReader<KafkaChangelog>,
    /// The reader's partitions changed since the source was last assigned.
    reassign: bool,
    last_progress: Instant,
    /// The task whose store is read with more than [`LARGE_BACKLOG`]
    /// records behind; other long ones wait for it. Cleared by `admit`
    /// once the reader no longer reads that task.
    long: Option<TaskId>,
}

impl SlicedRestore {
    /// Restores through `consumer` (outside the group, `read_committed`).
    pub(crate) fn new(consumer: RestoreConsumer) -> Self {
        let source = KafkaChangelog::new(Arc::new(consumer));
        SlicedRestore {
            queued: Default::default(),
            reader: ChangelogReader::new(source, ReadMode::ToEnd),
            reassign: false,
            last_progress: Instant::now(),
            long: None,
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
            waiting: false,
        };
        self.queued.insert(id, queued);
    }

    /// Restores `tasks` (the restoring ones) within `budget`: reads the
    /// next store of each, all together, and returns the tasks whose stores
    /// are all current (they leave the queue; a task of `tasks` that is not
    /// queued is current).
    pub(crate) fn restore(
        &mut self,
        tasks: &mut [&mut TaskInstance],
        budget: &mut RestoreBudget,
    ) -> Result<Vec<TaskId>, RestoreFailure> {
        let mut done = Vec::new();
        loop {
            self.admit(tasks, &mut done)?;
            if self.reader.is_empty() || budget.spent() {
                return Ok(done);
            }
            if self.last_progress.elapsed() >= RESTORE_STALL_TIMEOUT {
                return Err(RestoreFailure::reading(StreamsError::Timeout {
                    context:
                        "restoring tasks: no changelog record arrived; is the broker reachable?"
                            .to_string(),
                    after: RESTORE_STALL_TIMEOUT,
                }));
            }
            self.reader
                .fetch(budget.wait())
                .map_err(RestoreFailure::reading)?;
            let mut target = RestoringTasks {
                tasks: &mut *tasks,
                applied: Vec::new(),
                failed: None,
            };
            let applied = self.reader.apply(&mut target);
            let finished = applied.and_then(|n| Ok((n, self.reader.finish_done(&mut target)?)));
            let (applied, finished) = finished.map_err(|error| RestoreFailure {
                task: target.failed,
                error,
            })?;
            if applied > 0 {
                self.last_progress = Instant::now();
                budget.take(applied);
            }
            for (id, n) in target.applied {
                if let Some(q) = self.queued.get_mut(&id) {
                    q.meter.records(n);
                    q.stats.restored += n;
                }
            }
            for (id, store) in finished {
                tracing::debug!(task = %id, store, "store restored");
                if let Some(q) = self.queued.get_mut(&id) {
                    q.meter.finish_store();
                    q.stores_done += 1;
                }
                self.reassign = true;
            }
        }
    }

    /// Registers the next store behind its changelog of each queued task of
    /// `tasks` not being read and assigns the source anew when that changed
    /// what is read; tasks with no store left behind go to `done`.
    fn admit(
        &mut self,
        tasks: &mut [&mut TaskInstance],
        done: &mut Vec<TaskId>,
    ) -> Result<(), RestoreFailure> {
        // The long store's turn ends when the reader no longer reads its
        // task: its store finished, or the task closed (`forget`).
        if self.long.is_some_and(|id| !self.reader.reads_task(id)) {
            self.long = None;
        }
        // Stores found far behind in this pass: (task, store, records).
        let mut long = Vec::new();
        for task in tasks.iter() {
            let id = task.id();
            if self.reader.reads_task(id) || done.contains(&id) {
                continue;
            }
            let Some(q) = self.queued.get(&id) else {
                done.push(id);
                continue;
            };
            if q.waiting && self.long.is_some() {
                continue;
            }
            match self
                .start_next_store(task)
                .map_err(|e| RestoreFailure::of(id, e))?
            {
                Some((store, behind)) if behind > LARGE_BACKLOG => long.push((id, store, behind)),
                Some((store, behind)) => self.read(id, &store, behind),
                None => {
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
                    done.push(id);
                }
            }
        }
        // The shortest of the long stores is read when none is; the others
        // wait for their turn, unregistered.
        long.sort_by_key(|&(_, _, behind)| behind);
        for (id, store, behind) in long {
            if self.long.is_none() {
                self.long = Some(id);
                self.read(id, &store, behind);
            } else {
                self.reader.forget(id);
                if let Some(q) = self.queued.get_mut(&id) {
                    q.waiting = true;
                }
            }
        }
        if std::mem::take(&mut self.reassign) {
            self.last_progress = Instant::now();
            let assigned = if self.reader.is_empty() {
                self.reader.stop()
            } else {
                self.reader.start()
            };
            assigned.map_err(RestoreFailure::reading)?;
        }
        Ok(())
    }

    /// Store `store` of task `id`, registered with the reader `behind`
    /// records behind, is read from now on.
    fn read(&mut self, id: TaskId, store: &str, behind: i64) {
        if let Some(q) = self.queued.get_mut(&id) {
            q.waiting = false;
            q.meter.store_started(store, behind as u64);
        }
        self.reassign = true;
    }

    /// Registers the next store of `task` (queued) that is behind its
    /// changelog with the reader; returns it and how many records it is
    /// behind, or `None` when every store is current.
    fn start_next_store(
        &mut self,
        task: &TaskInstance,
    ) -> Result<Option<(String, i64)>, StreamsError> {
        let id = task.id();
        let Some(q) = self.queued.get_mut(&id) else {
            return Ok(None);
        };
        let changelogs: Vec<(String, String)> = task
            .changelog_topics()
            .skip(q.stores_done)
            .map(|(s, t)| (s.to_string(), t.to_string()))
            .collect();
        for (store, topic) in changelogs {
            let committed = task.store_committed_offset(&store);
            let found = self.reader.register(
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
                Plan::ReadFrom(from) => return Ok(Some((store, found.high - from))),
                Plan::UpToDate => q.stores_done += 1,
                Plan::AheadOfLog { committed, high } => {
                    return Err(ahead_of_log(id, &store, &topic, committed, high));
                }
            }
        }
        Ok(None)
    }

    /// Stops restoring task `id` (it closes): commits what its store read
    /// applied and forgets it; the other reads go on.
    pub(crate) fn forget(&mut self, task: &mut TaskInstance) {
        let id = task.id();
        self.queued.remove(&id);
        if !self.reader.reads_task(id) {
            return;
        }
        if let Err(e) = self.reader.finish_task(task, id) {
            tracing::warn!(task = %id, error = %e, "committing restore progress failed");
        }
        let assigned = if self.reader.is_empty() {
            self.reader.stop()
        } else {
            self.reader.start()
        };
        if let Err(e) = assigned {
            // The next slice assigns again.
            tracing::warn!(error = %e, "reassigning the restore consumer failed");
            self.reassign = true;
        }
    }
}

/// The restoring tasks as one [`RestoreTarget`]: each run of records goes
/// to the task its partition belongs to. Remembers the task whose store
/// failed.
struct RestoringTasks<'a, 'b> {
    tasks: &'a mut [&'b mut TaskInstance],
    /// Records applied, per task.
    applied: Vec<(TaskId, u64)>,
    failed: Option<TaskId>,
}

impl RestoringTasks<'_, '_> {
    fn task(&mut self, id: TaskId, store: &str) -> Result<&mut TaskInstance, StreamsError> {
        self.failed = Some(id);
        self.tasks
            .iter_mut()
            .find(|t| t.id() == id)
            .map(|t| &mut **t)
            .ok_or_else(|| {
                StreamsError::Store(StoreError::InvalidState {
                    store: store.to_string(),
                    message: format!("task {id} was restored after it stopped restoring"),
                })
            })
    }
}

impl RestoreTarget for RestoringTasks<'_, '_> {
    fn restore_batch(
        &mut self,
        from: &ChangelogPartition,
        records: &[ChangelogRecord<'_>],
        last_offset: i64,
    ) -> Result<(), StreamsError> {
        self.task(from.task, &from.store)?
            .restore_batch(&from.store, records, last_offset)?;
        self.failed = None;
        let n = records.len() as u64;
        match self.applied.iter_mut().find(|(id, _)| *id == from.task) {
            Some((_, applied)) => *applied += n,
            None => self.applied.push((from.task, n)),
        }
        Ok(())
    }

    fn commit(&mut self, from: &ChangelogPartition, last_offset: i64) -> Result<(), StreamsError> {
        RestoreTarget::commit(self.task(from.task, &from.store)?, from, last_offset)?;
        self.failed = None;
        Ok(())
    }
}
