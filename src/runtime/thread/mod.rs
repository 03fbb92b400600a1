//! A stream thread: one consumer in the group, one producer, the tasks of
//! its assignment, and the poll → process → punctuate → commit loop.
//!
//! # Roles
//!
//! As in Kafka Streams, the work is split into roles with one owner each:
//!
//! * [`StreamThread`] (this file) — the thread's state machine and error
//!   handling: every error is classified ([`crate::runtime::Recovery`]) and
//!   acted on in [`StreamThread::handle_error`];
//! * `phases.rs` — the main loop as phase functions: poll, buffer, process,
//!   punctuate, maybe-commit;
//! * [`producer::StreamsProducer`] — the producer, its transaction state and
//!   the classification of producer errors;
//! * [`tasks::TaskManager`] — the active tasks and their consumed offsets;
//! * `commit.rs` — the commit protocol over those two;
//! * `creator.rs` — opening a task: standby take-over, restore in slices;
//! * `rebalance.rs` — librdkafka's rebalance callbacks.
//!
//! # States
//!
//! ```text
//!            assign (tasks open)
//!  Starting ──────────────────────▶ Running ◀──────── recovered ───┐
//!     │                              │   ▲                          │
//!     │                 revoke/assign│   │assign (tasks open)       │
//!     │                              ▼   │                          │
//!     │                           Rebalancing ── error ──▶ Recovering
//!     │                                                  ▲  (retried with
//!     └──────────── error (not fatal) ───────────────────┘   backoff)
//!  any state ── shutdown ──▶ PendingShutdown ──▶ Dead
//!  any state ── fatal error ─────────────────────────────▶ Dead
//! ```
//!
//! (`Running` also goes to `Recovering` on an error.) The application is
//! `Rebalancing` while any thread is `Starting` or `Rebalancing`.
//!
//! # Invariants
//!
//! * Everything a rebalance touches lives in [`StreamThread`] behind one
//!   mutex. The loop holds it while processing a polled batch and releases
//!   it before polling, because librdkafka runs the rebalance callbacks
//!   inside `poll` on this same thread.
//! * Each eager rebalance and each rewind bumps `generation`; a batch polled
//!   under an older generation is dropped unprocessed (the consumer fetches
//!   those partitions again from the committed offsets). An incremental
//!   rebalance bumps `assignment_version` instead: only the records of the
//!   partitions it revoked (`dropped`) are dropped; the kept partitions'
//!   polled and buffered records stay, as their fetch positions do.
//! * On revoke the callback commits (or aborts when the assignment was lost)
//!   and closes the revoked tasks (every task, under the classic protocol's
//!   eager rebalances) **before it returns**; on assign it only creates
//!   the new tasks (`rebalance.rs`). They restore their stores from the changelog tail in slices
//!   (at most [`RESTORE_SLICE`] and [`RESTORE_SLICE_RECORDS`] each) between
//!   the loop's processing rounds, so running tasks keep going and `poll`
//!   is never blocked by a restore; a task is initialized and processed
//!   only once all its stores are current. Records of a restoring task's
//!   partitions wait in its buffers (which pause the partition when full).
//! * Exactly-once: a transaction is begun before the first record of a
//!   commit interval is processed; the commit follows `commit.rs`. Whatever
//!   aborts drops the tasks' open store writes and closes them; they reopen
//!   from their committed state and the consumer rewinds to the committed
//!   offsets, so nothing is processed twice into committed output.
//! * No error the broker reports as transient stops the thread: polling
//!   errors are logged and polling goes on; a recovery that cannot reach the
//!   broker is retried with backoff (`Recovering`).

mod client;
mod commit;
mod creator;
mod lag;
mod phases;
mod producer;
mod rebalance;
mod state;
mod tasks;
#[cfg(test)]
mod tests;

pub(crate) use super::env::ThreadEnv;
pub(crate) use rebalance::RebalanceContext;
pub(crate) use state::ThreadState;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::{Offset, TopicPartitionList};

use self::client::GroupConsumer;
use self::commit::CommitScope;
use self::creator::ActiveTaskCreator;
use self::producer::{ProducerTimeouts, StreamsProducer};
use self::tasks::TaskManager;
use super::collector::{ProducerEvents, ThreadProducer};
use super::purge::PurgeOffsets;
use super::restore::RestoreBudget;
use super::{AppState, Recovery, StreamsError};
use crate::metrics::{LagMeter, ThreadMeter};

/// Timeout of one transactional or flush call.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);
/// How much longer than its timeout the thread waits for a transactional
/// call before it abandons the producer (`thread::producer`).
const TXN_ABANDON_GRACE: Duration = Duration::from_secs(10);
/// The same once the application shuts down: the transaction timeout
/// (`transaction.timeout.ms`), after which the coordinator aborts the
/// transaction anyway.
const TXN_ABANDON_ON_SHUTDOWN: Duration = Duration::from_secs(10);
/// Timeout of reading committed offsets and seeking.
const OFFSETS_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait between two recovery attempts.
const MAX_RECOVERY_BACKOFF: Duration = Duration::from_secs(5);
/// The most time one restore slice takes between two processing rounds.
const RESTORE_SLICE: Duration = Duration::from_millis(100);
/// The most changelog records one restore slice applies.
const RESTORE_SLICE_RECORDS: u64 = 50_000;

/// One stream thread's state; see the module docs.
pub(crate) struct StreamThread {
    env: Arc<ThreadEnv>,
    index: usize,
    state: ThreadState,
    producer: StreamsProducer<ThreadProducer>,
    tasks: TaskManager,
    creator: ActiveTaskCreator,
    /// Bumped by every rebalance and rewind (module docs).
    generation: u64,
    /// The assignment as of the last rebalance.
    assignment: Vec<(String, i32)>,
    /// Bumped by every incremental rebalance: the loop then updates its
    /// buffers to the assignment, keeping the records of kept partitions.
    assignment_version: u64,
    /// Partitions revoked incrementally since the loop last looked: their
    /// polled and buffered records are dropped (fetched again by whoever
    /// owns them next, from the committed offset).
    dropped: Vec<(String, i32)>,
    /// The tasks the last revocation took (compared with the next
    /// assignment for `weir_rebalance_tasks_total`).
    revoked_tasks: Vec<crate::processor::TaskId>,
    /// An error a rebalance callback could not act on; the loop stops with it.
    fatal: Option<StreamsError>,
    /// Recovery attempts since the last success, and when the next is due.
    recovery_attempts: u32,
    retry_at: Instant,
    meter: ThreadMeter,
    /// Per assigned input partition, when its progress was last committed
    /// (wall clock, ms; from the offset metadata when it was committed
    /// elsewhere): the start of its current time without output.
    last_output_ms: std::collections::HashMap<(String, i32), i64>,
    /// The committed offset of each assigned input partition that has one,
    /// read when its tasks opened: where its fetch starts (`thread/lag.rs`).
    committed_offsets: std::collections::HashMap<(String, i32), i64>,
    /// Committed offsets of repartition partitions not yet purged.
    purgeable: PurgeOffsets,
    last_purge: Instant,
    /// While `Starting` under KIP-848: when the consumer was first seen
    /// in the group (member epoch > 0) with no partitions.
    joined_empty_at: Option<Instant>,
}

/// The stream thread shared by the loop and the rebalance callbacks.
type Shared = Arc<Mutex<StreamThread>>;

/// Interactive queries read straight from an idle thread: its loop waits
/// for input in `poll` without holding its lock (see
/// `crate::runtime::query`).
struct DirectQueries(std::sync::Weak<Mutex<StreamThread>>);

impl crate::runtime::query::DirectReads for DirectQueries {
    fn try_answer(
        &self,
        pending: crate::runtime::query::Pending,
    ) -> Option<crate::runtime::query::Pending> {
        let Some(thread) = self.0.upgrade() else {
            return Some(pending);
        };
        // A busy thread (processing, committing) answers from its loop.
        let Ok(t) = thread.try_lock() else {
            return Some(pending);
        };
        if !t.reads_committed_state() {
            return Some(pending);
        }
        t.answer_query(pending);
        None
    }
}

fn lock(thread: &Shared) -> MutexGuard<'_, StreamThread> {
    thread.lock().unwrap_or_else(|p| p.into_inner())
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs stream thread `index` until shutdown or a fatal error.
pub(crate) fn run(env: Arc<ThreadEnv>, index: usize, process_id: &str) -> Result<(), StreamsError> {
    let config = &env.config;
    let transactional_id = config
        .is_exactly_once()
        .then(|| format!("{}-{process_id}-{index}", config.application_id));
    let factory = {
        let config = config.clone();
        let produced = env.metrics.produced.clone();
        Box::new(move || {
            let events = Arc::new(ProducerEvents::metered(produced.clone()));
            super::clients::producer(&config, transactional_id.as_deref(), events)
        })
    };
    let producer = StreamsProducer::new(
        factory,
        config.is_exactly_once(),
        ProducerTimeouts {
            call: TXN_TIMEOUT,
            send_offsets: TXN_TIMEOUT.min(super::clients::transaction_timeout(config)),
            retry_for: producer::RETRY_FOR,
            abandon_grace: TXN_ABANDON_GRACE,
            abandon_on_shutdown: TXN_ABANDON_ON_SHUTDOWN,
        },
        env.shutdown.clone(),
    )?;
    let creator = ActiveTaskCreator::new(
        env.clone(),
        index,
        super::clients::active_restore_consumer(config)?,
    );
    let thread: Shared = Arc::new(Mutex::new(StreamThread {
        env: env.clone(),
        index,
        state: ThreadState::Created,
        producer,
        tasks: TaskManager::default(),
        creator,
        generation: 0,
        assignment: Vec::new(),
        assignment_version: 0,
        dropped: Vec::new(),
        revoked_tasks: Vec::new(),
        fatal: None,
        recovery_attempts: 0,
        retry_at: Instant::now(),
        meter: ThreadMeter::new(env.metrics.clone(), index),
        last_output_ms: std::collections::HashMap::new(),
        committed_offsets: std::collections::HashMap::new(),
        purgeable: PurgeOffsets::new(),
        last_purge: Instant::now(),
        joined_empty_at: None,
    }));
    let context = RebalanceContext {
        thread: thread.clone(),
        lag: LagMeter::new(env.metrics.clone()),
    };
    let consumer: BaseConsumer<RebalanceContext> =
        super::clients::consumer(config, index, process_id, context)?;
    let topics = env.layout.source_topics();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topic_refs)
        .map_err(|e| StreamsError::kafka(format!("subscribing to {topics:?}"), e))?;
    lock(&thread).set_state(ThreadState::Starting);
    env.queries.set_direct(
        index,
        Some(Arc::new(DirectQueries(Arc::downgrade(&thread)))),
    );

    let result = phases::main_loop(&env, &thread, &consumer);

    tracing::debug!(
        thread = index,
        ok = result.is_ok(),
        "stream thread stopping"
    );
    env.queries.set_direct(index, None);
    lock(&thread).shut_down(&consumer, result.is_ok());
    tracing::debug!(thread = index, "tasks closed; leaving the group");
    consumer.unsubscribe();
    drop(consumer);
    tracing::debug!(thread = index, "left the group");
    result
}

impl StreamThread {
    /// Whether a query may read the stores now: under exactly-once only
    /// when nothing was processed since the last commit (they hold
    /// committed state only).
    fn reads_committed_state(&self) -> bool {
        !(self.env.config.is_exactly_once() && self.tasks.commit_needed())
    }

    /// Answers `pending` from this thread's tasks.
    fn answer_query(&self, pending: crate::runtime::query::Pending) {
        crate::runtime::query::answer(pending, self.tasks.running(), self.tasks.restoring_tasks());
    }

    /// Moves to `next`, keeping the application's rebalancing count.
    fn set_state(&mut self, next: ThreadState) {
        let before = self.state;
        if !before.can_become(next) {
            tracing::warn!(
                thread = self.index,
                ?before,
                ?next,
                "unexpected stream thread transition"
            );
        }
        self.state = next;
        if !before.in_rebalance() && next.in_rebalance() {
            self.env.rebalancing.fetch_add(1, Ordering::SeqCst);
            self.env.state.transition(AppState::Rebalancing);
        }
        if before.in_rebalance() && !next.in_rebalance() {
            let last = self.env.rebalancing.fetch_sub(1, Ordering::SeqCst) == 1;
            let stopping = matches!(next, ThreadState::PendingShutdown | ThreadState::Dead);
            if last && !stopping {
                // Every thread has its tasks: the local ones opened ahead
                // that nobody took are not needed.
                self.env.warm.close_rest();
                self.env.state.transition(AppState::Running);
            }
        }
    }

    /// Commits what was processed since the last commit; see `commit.rs`.
    /// Returns whether there was anything to commit.
    fn commit(
        &mut self,
        consumer: &impl GroupConsumer<Group = ConsumerGroupMetadata>,
    ) -> Result<bool, StreamsError> {
        let started = Instant::now();
        let scope = CommitScope {
            partitions: &self.env.layout.partitions,
            layout: &self.env.layout,
        };
        let Some(committed) =
            commit::commit(&mut self.tasks, &mut self.producer, consumer, &scope)?
        else {
            return Ok(false);
        };
        self.note_output_gaps(&committed);
        self.note_purgeable(&committed);
        self.meter
            .commit_done(started, self.env.config.is_exactly_once());
        Ok(true)
    }

    /// Observes, per partition whose progress was just committed, the time
    /// since its previous commit (`weir_partition_output_gap_seconds`):
    /// under exactly-once its output became visible now and last then.
    fn note_output_gaps(&mut self, committed: &tasks::ConsumedOffsets) {
        let now = wall_clock_ms();
        for (topic, partitions) in committed {
            for &partition in partitions.keys() {
                let key = (topic.clone(), partition);
                if let Some(previous) = self.last_output_ms.insert(key, now) {
                    let gap = (now - previous).max(0) as f64 / 1000.0;
                    self.meter.output_gap(topic, partition, gap);
                }
            }
        }
    }

    /// Forgets the output times of partitions no longer assigned (and
    /// their gap series).
    fn forget_output_times(&mut self) {
        let assignment = &self.assignment;
        let gone: Vec<(String, i32)> = self
            .last_output_ms
            .keys()
            .filter(|p| !assignment.contains(p))
            .cloned()
            .collect();
        for p in &gone {
            self.last_output_ms.remove(p);
        }
        self.meter.forget_partitions(&gone);
    }

    /// Remembers the just-committed offsets of repartition topics and hands
    /// them to the purger once per `repartition_purge_interval_ms`.
    fn note_purgeable(&mut self, committed: &tasks::ConsumedOffsets) {
        let layout = &self.env.layout;
        for (topic, partitions) in committed {
            if layout.repartition_topics.iter().any(|t| t == topic) {
                for (&partition, &next) in partitions {
                    self.purgeable.insert((topic.clone(), partition), next);
                }
            }
        }
        let interval = Duration::from_millis(self.env.config.repartition_purge_interval_ms);
        if !self.purgeable.is_empty() && self.last_purge.elapsed() >= interval {
            self.last_purge = Instant::now();
            self.env.purger.purge(std::mem::take(&mut self.purgeable));
        }
    }

    /// Aborts the open transaction and drops every task's uncommitted state.
    fn abort(&mut self) {
        if self.producer.state() == producer::TxnState::InTransaction {
            self.meter.transaction_aborted();
        }
        commit::abort(&mut self.tasks, &mut self.producer);
    }

    fn close_tasks(&mut self) {
        if self.tasks.len() > 0 {
            self.meter.tasks_closed();
        }
        self.tasks.close_all(&mut self.creator);
    }

    /// Creates the tasks of the current assignment; they restore in slices
    /// between processing rounds ([`StreamThread::restore_slice`]) and
    /// start from the stream time of the last commit.
    fn open_tasks(
        &mut self,
        consumer: &impl GroupConsumer<Group = ConsumerGroupMetadata>,
    ) -> Result<(), StreamsError> {
        let ids = tasks::task_ids(&self.assignment, &self.env.layout);
        let committed = super::stream_time::committed_stream_times(
            |partitions| consumer.committed_offsets(partitions, OFFSETS_TIMEOUT),
            &self.assignment,
            &self.env.layout,
        )?;
        for (partition, at) in committed.committed_at {
            self.last_output_ms.entry(partition).or_insert(at);
        }
        self.committed_offsets = committed.offsets;
        self.tasks
            .open(&ids, &committed.stream_times, &mut self.creator)
    }

    /// Restores the restoring tasks for one slice of time and records;
    /// those that become current are initialized and run from the next
    /// round on.
    fn restore_slice(&mut self) -> Result<(), StreamsError> {
        // Initializing may emit records (punctuators, init writes).
        self.producer.begin_if_needed()?;
        let mut collector = self.producer.collector(&self.env.layout.partitions);
        let mut budget = RestoreBudget::new(RESTORE_SLICE, RESTORE_SLICE_RECORDS);
        self.tasks.restore(
            &mut self.creator,
            &mut budget,
            wall_clock_ms(),
            &mut collector,
        )?;
        Ok(())
    }

    /// Acts on an error of a step that could not complete, by its recovery
    /// class: a fatal one is returned; any other aborts the tasks and enters
    /// `Recovering` (a transient one too: it was retried where it happened,
    /// and what is left is to rebuild from the last commit). Errors of
    /// polling never come here: the poll phase logs them and goes on.
    fn handle_error(&mut self, error: StreamsError) -> Result<(), StreamsError> {
        let recovery = error.recovery();
        if recovery != Recovery::Fatal
            && matches!(
                error.kafka_code(),
                Some(
                    rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition
                        | rdkafka::types::RDKafkaErrorCode::UnknownPartition
                )
            )
            && let Some(missing) = self.missing_topic()
        {
            return Err(missing);
        }
        match recovery {
            Recovery::Fatal => Err(error),
            _ => {
                tracing::warn!(thread = self.index, error = %error, ?recovery, "aborting the transaction and rewinding to the last commit");
                self.abort();
                self.close_tasks();
                if recovery == Recovery::TaskCorrupted {
                    for id in tasks::task_ids(&self.assignment, &self.env.layout) {
                        if let Err(e) = self.env.stores.wipe_task(id) {
                            tracing::warn!(task = %id, error = %e, "wiping the corrupt task failed");
                        }
                    }
                }
                self.generation += 1;
                let attempts = self.recovery_attempts.saturating_add(1);
                self.recovery_attempts = attempts;
                self.retry_at = Instant::now() + recovery_backoff(attempts);
                if self.state != ThreadState::Recovering {
                    self.set_state(ThreadState::Recovering);
                }
                Ok(())
            }
        }
    }

    /// After an unknown-topic error: the first topic the application
    /// reads or keeps its state in that the cluster no longer lists (an
    /// internal topic deleted while running cannot be recovered from by
    /// rewinding; a source topic may have been deleted too).
    fn missing_topic(&self) -> Option<StreamsError> {
        let first = self.missing_topic_now()?;
        // Twice, a second apart: a broker that just restarted may answer
        // before its metadata caught up.
        std::thread::sleep(Duration::from_secs(1));
        let second = self.missing_topic_now()?;
        (first.to_string() == second.to_string()).then_some(second)
    }

    fn missing_topic_now(&self) -> Option<StreamsError> {
        let layout = &self.env.layout;
        let client = super::clients::metadata_client(&self.env.config).ok()?;
        let existing = super::topics::partition_counts(&client, Duration::from_secs(10)).ok()?;
        let internal = layout
            .changelog_topics
            .iter()
            .map(|(_, topic)| topic)
            .chain(&layout.repartition_topics);
        if let Some(topic) = internal.into_iter().find(|t| !existing.contains_key(*t)) {
            return Some(StreamsError::InternalTopicDeleted {
                topic: topic.clone(),
            });
        }
        layout
            .source_topics()
            .into_iter()
            .find(|t| !existing.contains_key(t))
            .map(|topic| StreamsError::MissingSourceTopic { topic })
    }

    /// Rebuilds the tasks after an abort: finishes the abort, replaces a
    /// fenced producer, rewinds the consumer to the committed offsets and
    /// reopens the tasks. An error leaves the thread `Recovering`.
    fn recover(&mut self, consumer: &BaseConsumer<RebalanceContext>) -> Result<(), StreamsError> {
        let result = self.try_recover(consumer);
        match result {
            Ok(()) => {
                if self.recovery_attempts > 1 {
                    tracing::info!(
                        thread = self.index,
                        attempts = self.recovery_attempts,
                        "recovered"
                    );
                }
                self.recovery_attempts = 0;
                self.set_state(ThreadState::Running);
                Ok(())
            }
            Err(e) => self.handle_error(e),
        }
    }

    fn try_recover(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
    ) -> Result<(), StreamsError> {
        self.producer.abort()?;
        self.producer.reset()?;
        self.close_tasks();
        self.generation += 1;
        rewind(consumer, &self.assignment)?;
        self.open_tasks(consumer)
    }

    /// Final commit (or abort), closing the tasks.
    fn shut_down(&mut self, consumer: &BaseConsumer<RebalanceContext>, clean: bool) {
        if clean && self.state == ThreadState::Running {
            if let Err(e) = self.commit(consumer) {
                tracing::warn!(error = %e, "final commit failed; aborting");
                self.abort();
            }
        } else {
            self.abort();
        }
        self.close_tasks();
        self.assignment.clear();
        self.set_state(ThreadState::PendingShutdown);
        self.set_state(ThreadState::Dead);
    }
}

/// The wait before recovery attempt `attempts` (1, 2, …): 100 ms doubling
/// up to [`MAX_RECOVERY_BACKOFF`].
fn recovery_backoff(attempts: u32) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let ms = 100u64.saturating_mul(1 << (attempts - 2).min(10));
    Duration::from_millis(ms).min(MAX_RECOVERY_BACKOFF)
}

/// Moves the consumer to the committed offsets of `assignment` (the start
/// of the partition where nothing was committed).
fn rewind(consumer: &impl GroupConsumer, assignment: &[(String, i32)]) -> Result<(), StreamsError> {
    if assignment.is_empty() {
        return Ok(());
    }
    let mut assigned = TopicPartitionList::new();
    for (topic, partition) in assignment {
        assigned.add_partition(topic, *partition);
    }
    let committed = consumer
        .committed_offsets(assigned, OFFSETS_TIMEOUT)
        .map_err(|e| StreamsError::kafka("reading committed offsets to rewind", e))?;
    let mut rewind = TopicPartitionList::new();
    for element in committed.elements() {
        let offset = match element.offset() {
            Offset::Offset(n) => Offset::Offset(n),
            _ => Offset::Beginning,
        };
        let _ = rewind.add_partition_offset(element.topic(), element.partition(), offset);
    }
    consumer
        .seek_partitions(rewind, OFFSETS_TIMEOUT)
        .map_err(|e| StreamsError::kafka("rewinding to the committed offsets", e))
}
