//! Reading changelog partitions into stores: the one mechanism behind an
//! active task's restore (`restore.rs`), standby replicas (`standby.rs`) and
//! the test driver's `restart_tasks` (Kafka Streams' `StoreChangelogReader`).
//!
//! A [`ChangelogReader`] reads records from a [`ChangelogSource`] — the
//! broker ([`KafkaChangelog`], a `read_committed` consumer without a group)
//! or the test driver's in-memory topic logs
//! ([`MemoryChangelog`](memory::MemoryChangelog)) — and applies them to a
//! [`RestoreTarget`] (a task's stores, or the standby tasks of an instance).
//!
//! # Where reading starts ([`Plan`])
//!
//! A store reports the changelog offset its committed state reflects
//! (`committed`, [`crate::state::StateStore::committed_offset`]). For a
//! changelog partition whose log holds offsets `low..high` (the low and high
//! watermarks):
//!
//! * a new store (no offset) reads from `low`;
//! * `committed + 1 < low`: the records in between were deleted (retention
//!   of a window changelog, `DeleteRecords`); reading starts at `low`, what
//!   the log still holds;
//! * `committed >= high`: the store reflects records the log does not have;
//!   the topic was deleted and recreated, or reset, while the local state
//!   stayed ([`Plan::AheadOfLog`]). Its data cannot be reconciled with the
//!   log: an active restore fails with [`crate::state::StoreError::Corrupt`]
//!   (remove the local state), a standby wipes its copy and reads from `low`;
//! * otherwise from `committed + 1`, and nothing when that is `high`.
//!
//! # Applying
//!
//! The source fills a [`ChangelogBatch`] (one reused buffer: no allocation
//! per record). Each run of consecutive records of one partition goes to its
//! store in one [`crate::state::StateStore::restore_batch`] together with the
//! offset of its last record, so the store's data and offset change
//! atomically. A partition's store commits with its last applied offset
//! every `commit_every` records ([`COMMIT_EVERY_RECORDS`]) and when the
//! reader commits: that makes what `restore_batch` wrote without RocksDB's
//! write-ahead log durable, and a crash in between resumes from the offset
//! the store reports.
//!
//! # Ending ([`ReadMode`])
//!
//! * [`ReadMode::ToEnd`] (restore): a partition is done when the record
//!   before its high watermark (as read when it was registered) was applied
//!   or the source reports its end — with `read_committed` the last offsets
//!   may be transaction markers, which are never delivered. Records written
//!   after the watermarks were read are not applied. A read that is not done
//!   within its timeout fails with [`StreamsError::Timeout`].
//! * [`ReadMode::Follow`] (standby): never done; applies what is appended.

mod kafka;
mod memory;

pub(crate) use kafka::KafkaChangelog;
#[cfg(test)]
pub(crate) use memory::MemoryChangelog;
pub(crate) use memory::restore_in_memory;

use std::ops::Range;
use std::time::{Duration, Instant};

use super::StreamsError;
use crate::processor::{TaskId, TaskInstance};
use crate::state::ChangelogRecord;

/// Records applied to a partition's store between two commits of it. A
/// commit after unlogged restore batches flushes the store's memtables and
/// waits (`src/state/rocks.rs`); RocksDB's own flushes of full memtables
/// keep data and offset consistent anyway (`atomic_flush`), so the commit
/// only bounds what a crash in the middle of a restore reads again. Every
/// 10,000 records it cost a synchronous flush and a small SST file each
/// time (bench/NOTES.md, *Restore after a crash*).
pub(crate) const COMMIT_EVERY_RECORDS: u64 = 1_000_000;
/// Most records one batch holds (one `restore_batch` per partition in it).
const BATCH_RECORDS: usize = 5_000;
/// Most key and value bytes one batch holds.
const BATCH_BYTES: usize = 16 << 20;
/// How long one poll of a restore waits for records.
const RESTORE_POLL: Duration = Duration::from_millis(100);

/// Where reading a store's changelog partition starts; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Read from this offset.
    ReadFrom(i64),
    /// The store already reflects the whole log.
    UpToDate,
    /// The store reflects offset `committed`, but the log ends before it, at
    /// `high`.
    AheadOfLog {
        /// The store's committed offset.
        committed: i64,
        /// The log's high watermark.
        high: i64,
    },
}

impl Plan {
    /// The plan for a store at `committed` and a log holding `low..high`.
    pub(crate) fn new(committed: Option<i64>, low: i64, high: i64) -> Plan {
        match committed {
            Some(committed) if committed >= high => Plan::AheadOfLog { committed, high },
            _ => {
                let from = committed.map_or(low, |c| c + 1).max(low);
                if from >= high {
                    Plan::UpToDate
                } else {
                    Plan::ReadFrom(from)
                }
            }
        }
    }
}

/// When a reader is done; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadMode {
    /// Up to the high watermark read at registration (restore).
    ToEnd,
    /// Never: keep applying what is appended (standby).
    Follow,
}

/// What [`ChangelogReader::register`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Registration {
    /// Where reading starts (the partition is read only for
    /// [`Plan::ReadFrom`], and for [`Plan::UpToDate`] when following).
    pub(crate) plan: Plan,
    /// The low watermark.
    pub(crate) low: i64,
    /// The high watermark.
    pub(crate) high: i64,
}

/// One changelog partition a reader applies to one store.
#[derive(Debug)]
pub(crate) struct ChangelogPartition {
    /// The task owning the store.
    pub(crate) task: TaskId,
    /// The store.
    pub(crate) store: String,
    /// The changelog topic.
    pub(crate) topic: String,
    /// The partition (the task's).
    pub(crate) partition: i32,
    /// The high watermark at registration: where [`ReadMode::ToEnd`] stops.
    pub(crate) end: i64,
    /// The next offset to apply.
    next: i64,
    /// Records applied since the store last committed.
    uncommitted: u64,
    /// The offset of the last record applied.
    last_applied: Option<i64>,
}

/// What changelog records are applied to.
pub(crate) trait RestoreTarget {
    /// Writes `records` of partition `from` into store `from.store` of task
    /// `from.task` as committed state with `last_offset`, the offset of the
    /// last of them: one [`crate::state::StateStore::restore_batch`].
    fn restore_batch(
        &mut self,
        from: &ChangelogPartition,
        records: &[ChangelogRecord<'_>],
        last_offset: i64,
    ) -> Result<(), StreamsError>;

    /// Commits store `from.store` of task `from.task` with `last_offset`,
    /// making the restored records durable.
    fn commit(&mut self, from: &ChangelogPartition, last_offset: i64) -> Result<(), StreamsError>;
}

/// A task's own stores (still `Created`).
impl RestoreTarget for TaskInstance {
    fn restore_batch(
        &mut self,
        from: &ChangelogPartition,
        records: &[ChangelogRecord<'_>],
        last_offset: i64,
    ) -> Result<(), StreamsError> {
        Ok(TaskInstance::restore_batch(
            self,
            &from.store,
            records,
            last_offset,
        )?)
    }

    fn commit(&mut self, from: &ChangelogPartition, last_offset: i64) -> Result<(), StreamsError> {
        let topic = from.topic.as_str();
        Ok(TaskInstance::commit(self, |t| {
            (t == topic).then_some(last_offset)
        })?)
    }
}

/// Where changelog records come from.
pub(crate) trait ChangelogSource {
    /// The low and high watermarks of `topic`/`partition`: the first offset
    /// the log holds and the offset after its last.
    fn watermarks(
        &mut self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), StreamsError>;

    /// From now on reads `from[i] = (topic, partition, first offset)` as part
    /// `i` of the batches, instead of what it read before; empty stops
    /// reading.
    fn assign(&mut self, from: &[(&str, i32, i64)]) -> Result<(), StreamsError>;

    /// Waits up to `wait` for records and adds what arrived to `batch`
    /// until it is full.
    fn poll(&mut self, wait: Duration, batch: &mut ChangelogBatch) -> Result<(), StreamsError>;
}

/// Records a source read, waiting to be applied: their bytes in one buffer
/// reused from batch to batch.
#[derive(Debug)]
pub(crate) struct ChangelogBatch {
    bytes: Vec<u8>,
    events: Vec<Event>,
    records: usize,
    max_records: usize,
    max_bytes: usize,
}

#[derive(Debug)]
enum Event {
    Record {
        part: usize,
        offset: i64,
        key: Range<usize>,
        value: Option<Range<usize>>,
    },
    /// The source has nothing more of `part` for now.
    End { part: usize },
}

impl ChangelogBatch {
    fn new(max_records: usize, max_bytes: usize) -> Self {
        ChangelogBatch {
            bytes: Vec::new(),
            events: Vec::new(),
            records: 0,
            max_records,
            max_bytes,
        }
    }

    /// Adds the record at `offset` of assigned part `part` (a null key is
    /// empty, a null value a tombstone).
    pub(crate) fn push(
        &mut self,
        part: usize,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) {
        let mut copy = |b: &[u8]| {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(b);
            start..self.bytes.len()
        };
        let key = copy(key.unwrap_or_default());
        let value = value.map(copy);
        self.events.push(Event::Record {
            part,
            offset,
            key,
            value,
        });
        self.records += 1;
    }

    /// The source reached the end of assigned part `part`.
    pub(crate) fn push_end(&mut self, part: usize) {
        self.events.push(Event::End { part });
    }

    /// How many more records fit (at least one while not full).
    pub(crate) fn room(&self) -> usize {
        if self.is_full() {
            0
        } else {
            self.max_records - self.records
        }
    }

    /// True when no more records should be added before applying.
    pub(crate) fn is_full(&self) -> bool {
        self.records >= self.max_records || self.bytes.len() >= self.max_bytes
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.events.clear();
        self.records = 0;
    }
}

/// Reads changelog partitions into stores; see the module docs.
pub(crate) struct ChangelogReader<S> {
    source: S,
    mode: ReadMode,
    commit_every: u64,
    /// Registered partitions; index `i` is part `i` of the source.
    partitions: Vec<ChangelogPartition>,
    batch: ChangelogBatch,
}

impl<S: ChangelogSource> ChangelogReader<S> {
    /// A reader with no partitions.
    pub(crate) fn new(source: S, mode: ReadMode) -> Self {
        ChangelogReader {
            source,
            mode,
            commit_every: COMMIT_EVERY_RECORDS,
            partitions: Vec::new(),
            batch: ChangelogBatch::new(BATCH_RECORDS, BATCH_BYTES),
        }
    }

    /// Reads the watermarks of `topic`/`partition`, the changelog of store
    /// `store` of task `task` (committed at `committed`), and registers it
    /// to be read when the plan says so. Takes effect at the next
    /// [`start`](Self::start).
    pub(crate) fn register(
        &mut self,
        task: TaskId,
        store: &str,
        (topic, partition): (&str, i32),
        committed: Option<i64>,
        timeout: Duration,
    ) -> Result<Registration, StreamsError> {
        let (low, high) = self.source.watermarks(topic, partition, timeout)?;
        let plan = Plan::new(committed, low, high);
        let next = match (plan, self.mode) {
            (Plan::ReadFrom(from), _) => Some(from),
            (Plan::UpToDate, ReadMode::Follow) => Some(high),
            (Plan::UpToDate, ReadMode::ToEnd) | (Plan::AheadOfLog { .. }, _) => None,
        };
        if let Some(next) = next {
            self.partitions.push(ChangelogPartition {
                task,
                store: store.to_string(),
                topic: topic.to_string(),
                partition,
                end: high,
                next,
                uncommitted: 0,
                last_applied: None,
            });
        }
        Ok(Registration { plan, low, high })
    }

    /// Starts reading the registered partitions, each from its next offset.
    pub(crate) fn start(&mut self) -> Result<(), StreamsError> {
        let from: Vec<(&str, i32, i64)> = self
            .partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.partition, p.next))
            .collect();
        self.source.assign(&from)
    }

    /// Stops reading and forgets every partition (commit first).
    pub(crate) fn stop(&mut self) -> Result<(), StreamsError> {
        self.partitions.clear();
        self.batch.clear();
        self.source.assign(&[])
    }

    /// Forgets the partitions registered for `task` (before
    /// [`start`](Self::start)).
    pub(crate) fn forget(&mut self, task: TaskId) {
        self.partitions.retain(|p| p.task != task);
    }

    /// True when no partition is registered.
    pub(crate) fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Whether a partition of `task` is registered.
    pub(crate) fn reads_task(&self, task: TaskId) -> bool {
        self.partitions.iter().any(|p| p.task == task)
    }

    /// Commits the stores of the partitions of a [`ReadMode::ToEnd`] reader
    /// that reached their end and forgets those partitions; returns the
    /// task and store of each. The source reads the rest from the next
    /// [`start`](Self::start) on (call it before the next fetch).
    pub(crate) fn finish_done<T: RestoreTarget + ?Sized>(
        &mut self,
        target: &mut T,
    ) -> Result<Vec<(TaskId, String)>, StreamsError> {
        if self.mode != ReadMode::ToEnd {
            return Ok(Vec::new());
        }
        self.commit_where(target, |p| p.next >= p.end)?;
        let mut finished = Vec::new();
        self.partitions.retain_mut(|p| {
            let done = p.next >= p.end;
            if done {
                finished.push((p.task, std::mem::take(&mut p.store)));
            }
            !done
        });
        Ok(finished)
    }

    /// Commits what the partitions of `task` applied and forgets them; the
    /// source reads the rest from the next [`start`](Self::start) on.
    pub(crate) fn finish_task<T: RestoreTarget + ?Sized>(
        &mut self,
        target: &mut T,
        task: TaskId,
    ) -> Result<(), StreamsError> {
        let committed = self.commit_where(target, |p| p.task == task);
        self.partitions.retain(|p| p.task != task);
        committed
    }

    /// Waits up to `wait` for records of the started partitions.
    pub(crate) fn fetch(&mut self, wait: Duration) -> Result<(), StreamsError> {
        self.source.poll(wait, &mut self.batch)
    }

    /// Applies what [`fetch`](Self::fetch) read to `target`, committing
    /// stores at the cadence; returns the records applied.
    pub(crate) fn apply<T: RestoreTarget + ?Sized>(
        &mut self,
        target: &mut T,
    ) -> Result<u64, StreamsError> {
        let Self {
            mode,
            commit_every,
            partitions,
            batch,
            ..
        } = self;
        let mut applied = 0;
        let mut run: Vec<ChangelogRecord<'_>> = Vec::new();
        // The part of the records in `run` and the offset of the last one.
        let mut run_of: Option<(usize, i64)> = None;
        for event in &batch.events {
            let part = match event {
                Event::Record { part, .. } | Event::End { part } => *part,
            };
            if let Some((run_part, last)) = run_of
                && run_part != part
            {
                let p = &mut partitions[run_part];
                applied += apply_run(target, p, &run, last, *commit_every)?;
                run.clear();
                run_of = None;
            }
            let p = &mut partitions[part];
            match event {
                Event::Record {
                    offset, key, value, ..
                } => {
                    let past_end = *mode == ReadMode::ToEnd && *offset >= p.end;
                    if *offset < p.next || past_end {
                        continue;
                    }
                    run.push(ChangelogRecord {
                        key: &batch.bytes[key.clone()],
                        value: value.clone().map(|v| &batch.bytes[v]),
                    });
                    run_of = Some((part, *offset));
                    p.next = offset + 1;
                }
                Event::End { .. } => {
                    if *mode == ReadMode::ToEnd {
                        p.next = p.next.max(p.end);
                    }
                }
            }
        }
        if let Some((run_part, last)) = run_of {
            let p = &mut partitions[run_part];
            applied += apply_run(target, p, &run, last, *commit_every)?;
        }
        drop(run);
        batch.clear();
        Ok(applied)
    }

    /// Commits every store that applied records since its last commit.
    pub(crate) fn commit<T: RestoreTarget + ?Sized>(
        &mut self,
        target: &mut T,
    ) -> Result<(), StreamsError> {
        self.commit_where(target, |_| true)
    }

    /// Commits the stores of the partitions `which` selects that applied
    /// records since their last commit.
    fn commit_where<T: RestoreTarget + ?Sized>(
        &mut self,
        target: &mut T,
        which: impl Fn(&ChangelogPartition) -> bool,
    ) -> Result<(), StreamsError> {
        for p in self.partitions.iter_mut().filter(|p| which(p)) {
            if let Some(last) = p.last_applied
                && p.uncommitted > 0
            {
                target.commit(p, last)?;
                p.uncommitted = 0;
            }
        }
        Ok(())
    }

    /// True when every partition of a [`ReadMode::ToEnd`] reader reached
    /// its end; never when following.
    pub(crate) fn is_done(&self) -> bool {
        self.mode == ReadMode::ToEnd && self.partitions.iter().all(|p| p.next >= p.end)
    }

    /// Reads every registered partition to its end into `target`, reporting
    /// the records applied to `progress` as they are; then commits and
    /// stops. Fails with [`StreamsError::Timeout`] when that takes longer
    /// than `timeout`.
    pub(crate) fn read_to_end<T: RestoreTarget + ?Sized>(
        &mut self,
        target: &mut T,
        timeout: Duration,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, StreamsError> {
        let started = Instant::now();
        self.start()?;
        let mut total = 0;
        while !self.is_done() {
            if started.elapsed() >= timeout {
                return Err(self.timeout(timeout));
            }
            self.fetch(RESTORE_POLL.min(timeout))?;
            let applied = self.apply(target)?;
            if applied > 0 {
                total += applied;
                progress(applied);
            }
        }
        self.commit(target)?;
        self.stop()?;
        Ok(total)
    }

    fn timeout(&self, after: Duration) -> StreamsError {
        let context = match self.partitions.iter().find(|p| p.next < p.end) {
            Some(p) => format!(
                "restoring store '{}' of task {} from {}/{}: applied up to offset {} of {}; is the broker reachable?",
                p.store, p.task, p.topic, p.partition, p.next, p.end
            ),
            None => "restoring from changelogs".to_string(),
        };
        StreamsError::Timeout { context, after }
    }

    /// Commits stores every `records` applied records instead of
    /// [`COMMIT_EVERY_RECORDS`], and holds at most `batch_records` records
    /// per batch.
    #[cfg(test)]
    pub(crate) fn with_cadence(mut self, records: u64, batch_records: usize) -> Self {
        self.commit_every = records;
        self.batch = ChangelogBatch::new(batch_records, BATCH_BYTES);
        self
    }
}

/// Applies one run of records of partition `p` (the last at `last`) and
/// commits its store when `commit_every` records are uncommitted.
fn apply_run<T: RestoreTarget + ?Sized>(
    target: &mut T,
    p: &mut ChangelogPartition,
    run: &[ChangelogRecord<'_>],
    last: i64,
    commit_every: u64,
) -> Result<u64, StreamsError> {
    target.restore_batch(p, run, last)?;
    let n = run.len() as u64;
    p.uncommitted += n;
    p.last_applied = Some(last);
    if p.uncommitted >= commit_every {
        target.commit(p, last)?;
        p.uncommitted = 0;
    }
    Ok(n)
}

#[cfg(test)]
pub(crate) mod tests;
