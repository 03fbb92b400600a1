//! Per-task input buffers: records polled from the consumer wait here, one
//! FIFO queue per assigned partition, until their task takes them in
//! timestamp order (Kafka Streams' `PartitionGroup`).
//!
//! # Invariants
//!
//! * A queue holds the records of one partition in offset order; the task
//!   takes the head with the **smallest timestamp** among its partitions, so
//!   a task reading several co-partitioned topics (a join, a merge) advances
//!   its stream time in timestamp order rather than in arrival order. Ties
//!   go to the partition listed first.
//! * When one of a task's partitions has nothing buffered but the consumer
//!   knows of records of it that were not polled yet (its fetched high
//!   watermark, the last stable offset under `read_committed`, is above its
//!   position), or does not know yet (no fetch answered), the task waits
//!   for them, as Kafka Streams waits for a partition whose lag is not
//!   known to be zero (KIP-695): otherwise a join would take stream records
//!   before the table rows that precede them, still on the broker, and drop
//!   them. The caller refreshes this before each processing round
//!   ([`TaskBuffers::refresh_behind`]); the wait ends after
//!   [`FETCH_WAIT_CAP`] at most.
//! * When one of a task's partitions has nothing buffered and nothing to
//!   fetch, the task waits up to `max_task_idle_ms` for it before
//!   processing the others ("enforced processing"); with the default 0 it
//!   never waits.
//! * Buffers are **bounded**: a partition whose queue still holds
//!   `buffered_records_per_partition` records after the tasks took what they
//!   could is reported for pausing, and for resuming once its queue drops
//!   below that bound again. Tasks drain their queues every loop iteration,
//!   so this happens while a task waits for an empty partition
//!   (`max_task_idle_ms`); pausing is not free (librdkafka drops what it
//!   prefetched for the partition and fetches it again on resume). The bound is soft:
//!   records librdkafka already fetched may still arrive after the pause and
//!   are kept (never dropped).
//! * Buffers belong to one consumer generation: a rebalance or a rewind
//!   clears them (the consumer fetches those records again from the
//!   committed offsets) and lifts every pause, of partitions still
//!   assigned or not: librdkafka keeps an application's pause through an
//!   unassign and a later assign, so a pause not lifted when its queue goes
//!   would stop the partition for good once it is assigned again.
//! * Within a generation a partition's offsets only grow: a record whose
//!   offset is below the next one expected was taken already (the
//!   consumer delivered it again) and is refused ([`Push::Again`]), so a
//!   task never processes an input offset twice between two rewinds. A
//!   short chaos run saw librdkafka deliver a repartition partition again
//!   from about 400 offsets back, with no rebalance, seek or error
//!   reported, and the task counted those records twice.
//!
//! # Cost per record
//!
//! `push` finds a partition's queue through an index built by `reset`
//! (topic, then partition: no string comparisons, no allocation); each task
//! counts its non-empty queues, so whether a task is ready is a comparison,
//! not a scan; the caller lists ready tasks into a vector it reuses
//! ([`TaskBuffers::tasks_with_records_into`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use rdkafka::Message;
use rdkafka::message::BorrowedMessage;

use crate::processor::TaskId;

/// The longest a task waits for records of an empty partition that the
/// consumer knows of but has not delivered (module docs): a fetch answers
/// within milliseconds; this bounds a wait on a lag that never resolves.
pub(crate) const FETCH_WAIT_CAP: Duration = Duration::from_secs(5);

/// What the buffers need to know about a record.
pub(crate) trait Buffered {
    /// The record's timestamp in milliseconds (`-1` when it has none).
    fn timestamp_ms(&self) -> i64;
    /// The record's offset in its partition (`-1`: unknown, never refused
    /// as a repeat).
    fn partition_offset(&self) -> i64 {
        -1
    }
}

impl Buffered for BorrowedMessage<'_> {
    fn timestamp_ms(&self) -> i64 {
        self.timestamp().to_millis().unwrap_or(-1)
    }

    fn partition_offset(&self) -> i64 {
        self.offset()
    }
}

/// What [`TaskBuffers::push`] did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Push {
    Buffered,
    /// Its partition is not assigned to that task; dropped.
    NotAssigned,
    /// Its `offset` is below `expected`, the next one this generation has
    /// not taken yet: delivered again, dropped. `first` says it starts a
    /// run of such records (the caller logs it once).
    Again {
        offset: i64,
        expected: i64,
        first: bool,
    },
}

#[cfg(test)]
impl Push {
    /// Whether the record was buffered.
    pub(crate) fn buffered(self) -> bool {
        self == Push::Buffered
    }
}

/// Counters of the buffers of all threads of an instance.
#[derive(Debug, Default)]
pub struct BufferStats {
    paused: AtomicU64,
    resumed: AtomicU64,
    peak_buffered: AtomicUsize,
}

/// A snapshot of [`BufferStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferStatsSnapshot {
    /// Times a partition was paused because its buffer was full.
    pub paused: u64,
    /// Times a paused partition was resumed because its buffer drained.
    pub resumed: u64,
    /// The most records ever buffered for one partition.
    pub peak_buffered: usize,
}

impl BufferStats {
    /// The current counters.
    pub fn snapshot(&self) -> BufferStatsSnapshot {
        BufferStatsSnapshot {
            paused: self.paused.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            peak_buffered: self.peak_buffered.load(Ordering::Relaxed),
        }
    }
}

struct PartitionQueue<M> {
    topic: String,
    partition: i32,
    records: VecDeque<M>,
    paused: bool,
    /// The offset after the last record taken in this generation (`-1`:
    /// none yet).
    next_offset: i64,
    /// The last record pushed was refused as delivered again.
    repeating: bool,
    /// Empty, with records the consumer has not delivered yet (or it does
    /// not know): its task waits ([`TaskBuffers::refresh_behind`]).
    behind: bool,
}

struct TaskQueues<M> {
    partitions: Vec<PartitionQueue<M>>,
    /// Queues of `partitions` that hold records.
    non_empty: usize,
    /// When the task started waiting for an empty partition.
    waiting_since: Option<Instant>,
    /// Waited out `max_task_idle` (or [`FETCH_WAIT_CAP`]): process without
    /// waiting until every partition has records again.
    enforced: bool,
    /// Waiting for records of an empty partition to be fetched.
    fetch_wait: bool,
}

/// The buffers of one stream thread. See the module docs.
pub(crate) struct TaskBuffers<M> {
    capacity: usize,
    max_idle: Duration,
    tasks: BTreeMap<TaskId, TaskQueues<M>>,
    /// topic → partition → (task, index in its `partitions`), built by `reset`.
    index: FxHashMap<String, FxHashMap<i32, (TaskId, usize)>>,
    buffered: usize,
}

impl<M: Buffered> TaskBuffers<M> {
    /// Empty buffers pausing partitions at `capacity` records, letting tasks
    /// wait `max_idle` for an empty partition.
    pub(crate) fn new(capacity: usize, max_idle: Duration) -> Self {
        Self {
            capacity: capacity.max(1),
            max_idle,
            tasks: BTreeMap::new(),
            index: FxHashMap::default(),
            buffered: 0,
        }
    }

    /// Forgets every buffered record and sets up empty queues for the given
    /// `(task, topic, partition)` assignment. Returns the partitions that
    /// were paused (the caller resumes them).
    pub(crate) fn reset(
        &mut self,
        assignment: impl IntoIterator<Item = (TaskId, String, i32)>,
    ) -> Vec<(String, i32)> {
        self.rebuild(assignment, |_| false)
    }

    /// Moves to a changed `(task, topic, partition)` assignment (an
    /// incremental rebalance) keeping the records of partitions that stay,
    /// except those in `dropped` (revoked meanwhile, even if assigned
    /// again: they are fetched anew from the committed offset). Returns the
    /// paused partitions whose queues were dropped (the caller resumes
    /// those still assigned).
    pub(crate) fn update(
        &mut self,
        assignment: impl IntoIterator<Item = (TaskId, String, i32)>,
        dropped: &[(String, i32)],
    ) -> Vec<(String, i32)> {
        self.rebuild(assignment, |p| !dropped.contains(p))
    }

    /// Sets up the queues of `assignment`, keeping the queue (records and
    /// pause) of each partition that stays with the same task and that
    /// `keep` accepts; returns the paused partitions whose queues went.
    fn rebuild(
        &mut self,
        assignment: impl IntoIterator<Item = (TaskId, String, i32)>,
        keep: impl Fn(&(String, i32)) -> bool,
    ) -> Vec<(String, i32)> {
        let mut old: HashMap<(String, i32), (TaskId, PartitionQueue<M>)> = HashMap::new();
        for (id, queues) in std::mem::take(&mut self.tasks) {
            for q in queues.partitions {
                old.insert((q.topic.clone(), q.partition), (id, q));
            }
        }
        for (task, topic, partition) in assignment {
            let key = (topic, partition);
            let kept = match old.remove(&key) {
                Some((owner, q)) if owner == task && keep(&key) => Some(q),
                Some(other) => {
                    old.insert(key.clone(), other);
                    None
                }
                None => None,
            };
            let (topic, partition) = key;
            let queue = kept.unwrap_or(PartitionQueue {
                topic,
                partition,
                records: VecDeque::new(),
                paused: false,
                next_offset: -1,
                repeating: false,
                behind: false,
            });
            self.tasks
                .entry(task)
                .or_insert_with(|| TaskQueues {
                    partitions: Vec::new(),
                    non_empty: 0,
                    waiting_since: None,
                    enforced: false,
                    fetch_wait: false,
                })
                .partitions
                .push(queue);
        }
        self.index.clear();
        self.buffered = 0;
        for (id, queues) in &mut self.tasks {
            queues
                .partitions
                .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            queues.non_empty = queues
                .partitions
                .iter()
                .filter(|q| !q.records.is_empty())
                .count();
            for (i, q) in queues.partitions.iter().enumerate() {
                self.buffered += q.records.len();
                self.index
                    .entry(q.topic.clone())
                    .or_default()
                    .insert(q.partition, (*id, i));
            }
        }
        old.into_values()
            .filter(|(_, q)| q.paused)
            .map(|(_, q)| (q.topic, q.partition))
            .collect()
    }

    /// Appends a record of `topic`/`partition` for `task`, unless that
    /// partition is not the task's or the record's offset was taken
    /// already in this generation (module docs).
    pub(crate) fn push(&mut self, task: TaskId, topic: &str, partition: i32, record: M) -> Push {
        let Some(&(owner, i)) = self.index.get(topic).and_then(|p| p.get(&partition)) else {
            return Push::NotAssigned;
        };
        if owner != task {
            return Push::NotAssigned;
        }
        let Some(queues) = self.tasks.get_mut(&task) else {
            return Push::NotAssigned;
        };
        let queue = &mut queues.partitions[i];
        let offset = record.partition_offset();
        if offset >= 0 {
            if offset < queue.next_offset {
                let first = !queue.repeating;
                queue.repeating = true;
                return Push::Again {
                    offset,
                    expected: queue.next_offset,
                    first,
                };
            }
            queue.next_offset = offset + 1;
            queue.repeating = false;
        }
        if queue.records.is_empty() {
            queues.non_empty += 1;
        }
        queue.records.push_back(record);
        self.buffered += 1;
        Push::Buffered
    }

    /// Records buffered over all tasks.
    pub(crate) fn len(&self) -> usize {
        self.buffered
    }

    /// Partitions that just reached the bound: marks them paused and returns
    /// them (the caller pauses them in the consumer). Updates `stats`.
    pub(crate) fn take_full(&mut self, stats: &BufferStats) -> Vec<(String, i32)> {
        let mut out = Vec::new();
        for queue in self
            .tasks
            .values_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            stats
                .peak_buffered
                .fetch_max(queue.records.len(), Ordering::Relaxed);
            if !queue.paused && queue.records.len() >= self.capacity {
                queue.paused = true;
                out.push((queue.topic.clone(), queue.partition));
            }
        }
        stats.paused.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Paused partitions whose queue dropped below the bound: marks them
    /// resumed and returns them (the caller resumes them in the consumer).
    pub(crate) fn take_drained(&mut self, stats: &BufferStats) -> Vec<(String, i32)> {
        let mut out = Vec::new();
        for queue in self
            .tasks
            .values_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            if queue.paused && queue.records.len() < self.capacity {
                queue.paused = false;
                out.push((queue.topic.clone(), queue.partition));
            }
        }
        stats.resumed.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Whether `task` may take a record now (see [`TaskBuffers::next`]).
    fn ready(&mut self, task: TaskId, now: Instant) -> Option<&mut TaskQueues<M>> {
        let max_idle = self.max_idle;
        let queues = self.tasks.get_mut(&task)?;
        if queues.non_empty == 0 {
            return None;
        }
        queues.fetch_wait = false;
        if queues.non_empty == queues.partitions.len() {
            queues.waiting_since = None;
            queues.enforced = false;
        } else if !queues.enforced
            && queues
                .partitions
                .iter()
                .any(|q| q.behind && q.records.is_empty())
        {
            let since = *queues.waiting_since.get_or_insert(now);
            if now.duration_since(since) < FETCH_WAIT_CAP {
                queues.fetch_wait = true;
                return None;
            }
            queues.enforced = true;
        } else if !queues.enforced && !max_idle.is_zero() {
            let since = *queues.waiting_since.get_or_insert(now);
            if now.duration_since(since) < max_idle {
                return None;
            }
            queues.enforced = true;
        } else if !queues.enforced {
            // A wait for a fetch ended (the partition caught up) and no
            // `max_task_idle` wait follows: the task no longer waits. A
            // stale start would make `waiting` true, and the thread poll
            // without a timeout (a busy loop) until the partition gets
            // records, which a join's table partition may never do.
            queues.waiting_since = None;
        }
        Some(queues)
    }

    /// The next record of `task` in timestamp order, with its partition; or
    /// `None` when nothing is buffered or the task waits for an empty
    /// partition (`max_task_idle_ms`).
    pub(crate) fn next(&mut self, task: TaskId, now: Instant) -> Option<M> {
        let queues = self.ready(task, now)?;
        let queue = queues
            .partitions
            .iter_mut()
            .filter(|q| !q.records.is_empty())
            .min_by_key(|q| q.records.front().map_or(i64::MAX, Buffered::timestamp_ms))?;
        let record = queue.records.pop_front()?;
        if queue.records.is_empty() {
            queues.non_empty -= 1;
            // Whether more of it is on its way is known at the next
            // refresh; until then the task waits for it.
            queue.behind = true;
        }
        self.buffered -= 1;
        Some(record)
    }

    /// Replaces the contents of `out` with the tasks that have buffered
    /// records, in task order; reuse `out` between loop iterations.
    pub(crate) fn tasks_with_records_into(&self, out: &mut Vec<TaskId>) {
        out.clear();
        out.extend(
            self.tasks
                .iter()
                .filter(|(_, t)| t.non_empty > 0)
                .map(|(id, _)| *id),
        );
    }

    /// The tasks that have buffered records, in a new vector (see
    /// [`TaskBuffers::tasks_with_records_into`] for the loop).
    #[cfg(test)]
    pub(crate) fn tasks_with_records(&self) -> Vec<TaskId> {
        let mut out = Vec::new();
        self.tasks_with_records_into(&mut out);
        out
    }

    /// Whether some task with buffered records waits out
    /// `max_task_idle_ms` for an empty partition (the caller should poll
    /// again within it; while it is true the thread polls with a timeout
    /// of at most `max_task_idle_ms`, so a stale wait is a busy loop).
    pub(crate) fn waiting(&self) -> bool {
        self.tasks
            .values()
            .any(|t| t.non_empty > 0 && t.waiting_since.is_some() && !t.enforced && !t.fetch_wait)
    }

    /// Whether some task waits for records of an empty partition to be
    /// fetched (module docs): polling brings them.
    pub(crate) fn waiting_for_fetch(&self) -> bool {
        self.tasks.values().any(|t| t.fetch_wait)
    }

    /// Notes, for each empty partition of a task that reads several and has
    /// records buffered, whether the consumer has records of it not yet
    /// delivered (`behind(topic, partition)`; module docs). Call before
    /// each processing round; partitions of one-partition tasks are never
    /// asked about. A partition that runs empty during a round counts as
    /// behind until the next refresh.
    pub(crate) fn refresh_behind(&mut self, mut behind: impl FnMut(&str, i32) -> bool) {
        for queues in self.tasks.values_mut() {
            let all = queues.partitions.len();
            if all < 2 || queues.non_empty == 0 || queues.non_empty == all {
                continue;
            }
            for q in &mut queues.partitions {
                q.behind = q.records.is_empty() && behind(&q.topic, q.partition);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Rec(i64, &'static str);

    impl Buffered for Rec {
        fn timestamp_ms(&self) -> i64 {
            self.0
        }
    }

    fn task(p: i32) -> TaskId {
        TaskId {
            subtopology: 0,
            partition: p,
        }
    }

    fn two_topic_buffers(capacity: usize, idle: Duration) -> TaskBuffers<Rec> {
        let mut b = TaskBuffers::new(capacity, idle);
        b.reset([
            (task(0), "left".to_string(), 0),
            (task(0), "right".to_string(), 0),
            (task(1), "left".to_string(), 1),
        ]);
        b
    }

    #[test]
    fn a_task_takes_its_partitions_in_timestamp_order() {
        let mut b = two_topic_buffers(100, Duration::ZERO);
        for (topic, r) in [
            ("left", Rec(10, "l10")),
            ("left", Rec(30, "l30")),
            ("right", Rec(5, "r5")),
            ("right", Rec(20, "r20")),
            ("right", Rec(40, "r40")),
        ] {
            assert!(b.push(task(0), topic, 0, r).buffered());
        }
        assert_eq!(
            b.push(task(0), "other", 0, Rec(1, "x")),
            Push::NotAssigned,
            "unassigned partition"
        );
        assert_eq!(b.len(), 5);
        let now = Instant::now();
        // Nothing more to fetch of either side.
        let order: Vec<&str> = std::iter::from_fn(|| {
            b.refresh_behind(|_, _| false);
            b.next(task(0), now)
        })
        .map(|r| r.1)
        .collect();
        assert_eq!(order, ["r5", "l10", "r20", "l30", "r40"]);
        assert_eq!(b.len(), 0);
        assert_eq!(b.next(task(1), now), None);
    }

    #[test]
    fn a_task_waits_for_an_empty_partition_up_to_max_idle() {
        let mut b = two_topic_buffers(100, Duration::from_millis(50));
        b.push(task(0), "left", 0, Rec(10, "l10"));
        let t0 = Instant::now();
        assert_eq!(b.next(task(0), t0), None, "waits for the right side");
        assert!(b.waiting());
        assert_eq!(b.next(task(0), t0 + Duration::from_millis(49)), None);
        assert_eq!(
            b.next(task(0), t0 + Duration::from_millis(50)).map(|r| r.1),
            Some("l10"),
            "enforced processing after max idle"
        );
        b.push(task(0), "left", 0, Rec(11, "l11"));
        assert_eq!(
            b.next(task(0), t0 + Duration::from_millis(51)).map(|r| r.1),
            Some("l11"),
            "stays enforced until both sides have data"
        );
        b.push(task(0), "left", 0, Rec(30, "l30"));
        b.push(task(0), "right", 0, Rec(20, "r20"));
        assert_eq!(b.next(task(0), t0).map(|r| r.1), Some("r20"));
        assert_eq!(b.next(task(0), t0), None, "waits again");
    }

    #[test]
    fn a_task_waits_for_an_empty_partition_with_records_still_to_fetch() {
        let mut b = two_topic_buffers(100, Duration::ZERO);
        b.push(task(0), "left", 0, Rec(10, "l10"));
        let t0 = Instant::now();
        // The right side's records are on the broker (or its lag unknown).
        b.refresh_behind(|topic, _| topic == "right");
        assert_eq!(b.next(task(0), t0), None, "waits for the fetch");
        assert!(b.waiting_for_fetch());
        assert!(!b.waiting(), "not a max_task_idle wait: polling brings it");
        b.push(task(0), "right", 0, Rec(5, "r5"));
        b.refresh_behind(|topic, _| topic == "right");
        assert_eq!(b.next(task(0), t0).map(|r| r.1), Some("r5"));
        assert_eq!(
            b.next(task(0), t0),
            None,
            "the right side ran empty: behind until the next refresh"
        );
        b.refresh_behind(|_, _| false);
        assert_eq!(
            b.next(task(0), t0).map(|r| r.1),
            Some("l10"),
            "caught up: the left side goes on"
        );
        assert!(!b.waiting_for_fetch());
        b.push(task(0), "left", 0, Rec(12, "l12"));
        assert!(
            !b.waiting(),
            "the fetch wait is over and max_task_idle is 0: nothing to wait out (the thread would poll without a timeout)"
        );
        assert_eq!(b.next(task(0), t0).map(|r| r.1), Some("l12"));
        assert!(!b.waiting(), "nothing buffered: nothing to wait for");
    }

    #[test]
    fn a_wait_for_a_fetch_ends_after_the_cap() {
        let mut b = two_topic_buffers(100, Duration::ZERO);
        b.push(task(0), "left", 0, Rec(10, "l10"));
        b.push(task(0), "left", 0, Rec(11, "l11"));
        let t0 = Instant::now();
        b.refresh_behind(|_, _| true);
        assert_eq!(b.next(task(0), t0), None);
        assert_eq!(b.next(task(0), t0 + FETCH_WAIT_CAP / 2), None);
        assert_eq!(
            b.next(task(0), t0 + FETCH_WAIT_CAP).map(|r| r.1),
            Some("l10"),
            "enforced processing after the cap"
        );
        b.refresh_behind(|_, _| true);
        assert_eq!(
            b.next(task(0), t0 + FETCH_WAIT_CAP).map(|r| r.1),
            Some("l11"),
            "stays enforced until both sides have data"
        );
    }

    #[test]
    fn a_one_partition_task_never_waits_for_a_fetch() {
        let mut b = two_topic_buffers(100, Duration::ZERO);
        b.push(task(1), "left", 1, Rec(1, "a"));
        b.push(task(1), "left", 1, Rec(2, "b"));
        let mut asked = 0;
        b.refresh_behind(|_, _| {
            asked += 1;
            true
        });
        assert_eq!(asked, 0, "only tasks reading several partitions are asked");
        let now = Instant::now();
        assert_eq!(b.next(task(1), now).map(|r| r.1), Some("a"));
        assert_eq!(b.next(task(1), now).map(|r| r.1), Some("b"));
    }

    #[test]
    fn full_partitions_are_paused_and_resumed_when_drained() {
        let stats = BufferStats::default();
        let mut b = two_topic_buffers(3, Duration::ZERO);
        for i in 0..4 {
            b.push(task(1), "left", 1, Rec(i, "l"));
        }
        b.push(task(0), "left", 0, Rec(0, "x"));
        assert_eq!(b.take_full(&stats), [("left".to_string(), 1)]);
        assert!(b.take_full(&stats).is_empty(), "paused once");
        assert!(b.take_drained(&stats).is_empty(), "still full");
        let now = Instant::now();
        b.next(task(1), now);
        assert!(
            b.take_drained(&stats).is_empty(),
            "3 left: still at the bound"
        );
        b.next(task(1), now);
        assert_eq!(b.take_drained(&stats), [("left".to_string(), 1)]);
        let snap = stats.snapshot();
        assert_eq!((snap.paused, snap.resumed, snap.peak_buffered), (1, 1, 4));
    }

    #[test]
    fn reset_drops_records_and_reports_paused_partitions() {
        let stats = BufferStats::default();
        let mut b = two_topic_buffers(1, Duration::ZERO);
        b.push(task(0), "right", 0, Rec(1, "r"));
        assert_eq!(b.take_full(&stats).len(), 1);
        let paused = b.reset([(task(0), "right".to_string(), 0)]);
        assert_eq!(paused, [("right".to_string(), 0)]);
        assert_eq!(b.len(), 0);
        assert_eq!(b.tasks_with_records(), Vec::<TaskId>::new());
    }

    #[test]
    fn an_update_keeps_the_records_of_partitions_that_stay() {
        let stats = BufferStats::default();
        let mut b = two_topic_buffers(2, Duration::ZERO);
        b.push(task(0), "left", 0, Rec(1, "l0"));
        b.push(task(1), "left", 1, Rec(2, "l1"));
        b.push(task(1), "left", 1, Rec(3, "l1b"));
        assert_eq!(b.take_full(&stats), [("left".to_string(), 1)]);
        // Task 1 is revoked, task 2 assigned; task 0 stays.
        let paused = b.update(
            [
                (task(0), "left".to_string(), 0),
                (task(0), "right".to_string(), 0),
                (task(2), "left".to_string(), 2),
            ],
            &[("left".to_string(), 1)],
        );
        assert_eq!(paused, [("left".to_string(), 1)]);
        assert_eq!(b.len(), 1, "task 0's record stays, task 1's are gone");
        assert!(b.push(task(2), "left", 2, Rec(4, "l2")).buffered());
        assert!(
            !b.push(task(1), "left", 1, Rec(5, "x")).buffered(),
            "revoked"
        );
        let now = Instant::now();
        assert_eq!(b.next(task(0), now).map(|r| r.1), Some("l0"));
        assert_eq!(b.next(task(2), now).map(|r| r.1), Some("l2"));
        assert_eq!(b.len(), 0);
        // A partition revoked and assigned again in one round starts empty.
        b.push(task(0), "left", 0, Rec(6, "stale"));
        b.update(
            [
                (task(0), "left".to_string(), 0),
                (task(0), "right".to_string(), 0),
            ],
            &[("left".to_string(), 0)],
        );
        assert_eq!(b.len(), 0);
        assert!(b.push(task(0), "left", 0, Rec(7, "fresh")).buffered());
    }

    #[test]
    fn records_reach_only_the_task_that_owns_their_partition() {
        let mut b = two_topic_buffers(100, Duration::ZERO);
        assert!(
            !b.push(task(0), "left", 1, Rec(1, "x")).buffered(),
            "left/1 belongs to task 1"
        );
        assert!(
            !b.push(task(0), "left", 7, Rec(1, "x")).buffered(),
            "unassigned"
        );
        assert!(b.push(task(1), "left", 1, Rec(1, "l1")).buffered());
        assert!(b.push(task(0), "right", 0, Rec(2, "r0")).buffered());
        let mut ready = vec![task(9)];
        b.tasks_with_records_into(&mut ready);
        assert_eq!(ready, [task(0), task(1)], "replaced, in task order");
        let now = Instant::now();
        assert_eq!(b.next(task(1), now).map(|r| r.1), Some("l1"));
        b.tasks_with_records_into(&mut ready);
        assert_eq!(ready, [task(0)]);
        // A new assignment moves left/1 to task 0.
        b.reset([(task(0), "left".to_string(), 1)]);
        assert!(!b.push(task(1), "left", 1, Rec(3, "x")).buffered());
        assert!(b.push(task(0), "left", 1, Rec(3, "l1")).buffered());
        assert_eq!(b.next(task(0), now).map(|r| r.1), Some("l1"));
        assert_eq!(b.len(), 0);
    }

    #[derive(Debug, PartialEq)]
    struct At(i64);

    impl Buffered for At {
        fn timestamp_ms(&self) -> i64 {
            self.0
        }

        fn partition_offset(&self) -> i64 {
            self.0
        }
    }

    #[test]
    fn an_offset_taken_already_in_this_generation_is_refused() {
        let mut b: TaskBuffers<At> = TaskBuffers::new(100, Duration::ZERO);
        let assignment = || [(task(0), "in".to_string(), 0)];
        b.reset(assignment());
        for o in [10, 11, 13] {
            assert_eq!(b.push(task(0), "in", 0, At(o)), Push::Buffered);
        }
        // Delivered again from 11: refused until past 13, logged once.
        assert_eq!(
            b.push(task(0), "in", 0, At(11)),
            Push::Again {
                offset: 11,
                expected: 14,
                first: true
            }
        );
        assert_eq!(
            b.push(task(0), "in", 0, At(13)),
            Push::Again {
                offset: 13,
                expected: 14,
                first: false
            }
        );
        assert_eq!(b.push(task(0), "in", 0, At(14)), Push::Buffered);
        let now = Instant::now();
        let taken: Vec<i64> = std::iter::from_fn(|| b.next(task(0), now))
            .map(|r| r.0)
            .collect();
        assert_eq!(taken, [10, 11, 13, 14], "each offset once");
        // A partition kept through an incremental rebalance remembers...
        b.update(assignment(), &[]);
        assert!(!b.push(task(0), "in", 0, At(12)).buffered());
        // ...one revoked meanwhile, or a rewind, starts anew.
        b.update(assignment(), &[("in".to_string(), 0)]);
        assert!(b.push(task(0), "in", 0, At(12)).buffered());
        b.reset(assignment());
        assert!(b.push(task(0), "in", 0, At(5)).buffered());
    }
}
