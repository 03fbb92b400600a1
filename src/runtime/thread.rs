//! A stream thread: one consumer in the group, one producer, the tasks of
//! its assignment, and the poll → process → commit loop.
//!
//! # Invariants
//!
//! * Everything a thread owns that a rebalance touches (tasks, producer,
//!   consumed offsets, the open transaction) lives in [`Core`] behind one
//!   mutex. The loop holds it while processing a polled batch and releases
//!   it before polling, because librdkafka runs the rebalance callbacks
//!   ([`RebalanceContext`]) inside `poll` on this same thread.
//! * Each rebalance bumps `Core::generation`; a batch polled under an older
//!   generation is dropped unprocessed (its partitions were committed and
//!   revoked; the consumer fetches them again from the committed offsets).
//! * On revoke the callback commits (or aborts when the assignment was lost)
//!   and closes every task **before it returns**; on assign it creates the
//!   tasks, restores their stores from the changelog tail, and initializes
//!   them before processing starts.
//! * Exactly-once: a transaction is begun before the first record of a commit
//!   interval is processed. A commit flushes the producer (delivery reports
//!   give each changelog partition's last offset), sends the consumed offsets
//!   (each carrying its task's stream time as metadata, see
//!   [`super::stream_time`]) with the group metadata, commits the
//!   transaction, and only then commits
//!   the stores with those changelog offsets. Any error that requires an
//!   abort aborts the transaction, drops the tasks' open store writes,
//!   rebuilds the tasks and rewinds the consumer to the committed offsets.
//! * At-least-once: a commit flushes the producer, commits the stores, then
//!   commits the consumed offsets.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers as _};
use rdkafka::producer::{Producer, PurgeConfig};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::buffer::{BufferStats, TaskBuffers};
use super::collector::{KafkaCollector, ProducerEvents, ThreadProducer};
use super::purge::{PurgeOffsets, Purger};
use super::restore::restore_task;
use super::standby::StandbyRegistry;
use super::stores::InstanceState;
use super::topics::TopicLayout;
use super::{AppState, StateCell, StreamsError};
use crate::config::StreamsConfig;
use crate::metrics::{LagMeter, Metrics, RestoreMeter, ThreadMeter};
use crate::processor::{Headers, InputRecord, TaskConfig, TaskId, TaskInstance};
use crate::topology::Topology;

/// Records taken from the consumer per poll round at most.
const MAX_BATCH: usize = 1000;
/// Timeout of transactional and flush calls.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// What every thread of an instance shares.
pub(crate) struct ThreadEnv {
    pub(crate) config: StreamsConfig,
    pub(crate) topology: Arc<Topology>,
    pub(crate) layout: TopicLayout,
    pub(crate) task_config: TaskConfig,
    pub(crate) stores: Arc<InstanceState>,
    pub(crate) state: Arc<StateCell>,
    pub(crate) shutdown: Arc<AtomicBool>,
    /// Threads currently between a revocation and the end of restoration.
    pub(crate) rebalancing: Arc<AtomicUsize>,
    pub(crate) metrics: Arc<Metrics>,
    /// Input buffer counters of all threads.
    pub(crate) buffer_stats: Arc<BufferStats>,
    /// Deletes consumed records of repartition topics.
    pub(crate) purger: Purger,
    /// Active and standby tasks of this instance.
    pub(crate) standbys: Arc<StandbyRegistry>,
}

/// The state a rebalance touches; see the module docs.
pub(crate) struct Core {
    env: Arc<ThreadEnv>,
    thread: usize,
    producer: ThreadProducer,
    events: Arc<ProducerEvents>,
    restore_consumer: BaseConsumer,
    tasks: BTreeMap<TaskId, TaskInstance>,
    /// topic → partition → next offset to commit (last processed + 1).
    offsets: HashMap<String, HashMap<i32, i64>>,
    txn_open: bool,
    dirty: bool,
    generation: u64,
    /// The assignment as of the last rebalance.
    assignment: Vec<(String, i32)>,
    fatal: Option<StreamsError>,
    in_rebalance: bool,
    meter: ThreadMeter,
    /// Committed offsets of repartition partitions not yet purged.
    purgeable: PurgeOffsets,
    last_purge: Instant,
}

impl Core {
    fn exactly_once(&self) -> bool {
        self.env.config.is_exactly_once()
    }

    fn transactional_id(&self) -> String {
        self.producer
            .context()
            .transactional_id
            .clone()
            .unwrap_or_default()
    }

    /// Classifies a producer error into "abort and go on" or fatal.
    fn classify(&self, context: &str, error: KafkaError) -> TxnError {
        use RDKafkaErrorCode::{Fenced, InvalidProducerEpoch, ProducerFenced};
        if let KafkaError::Transaction(rd) = &error
            && (rd.is_fatal() || matches!(rd.code(), Fenced | ProducerFenced))
        {
            if matches!(rd.code(), Fenced | ProducerFenced | InvalidProducerEpoch) {
                return TxnError::Fatal(StreamsError::Fenced {
                    transactional_id: self.transactional_id(),
                });
            }
            return TxnError::Fatal(StreamsError::kafka(context.to_string(), error));
        }
        TxnError::Abort(StreamsError::kafka(context.to_string(), error))
    }

    fn begin_if_needed(&mut self) -> Result<(), TxnError> {
        if self.exactly_once() && !self.txn_open {
            self.producer
                .begin_transaction()
                .map_err(|e| self.classify("beginning a transaction", e))?;
            self.txn_open = true;
        }
        Ok(())
    }

    fn offsets_list(&self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (topic, partitions) in &self.offsets {
            for (&partition, &next) in partitions {
                // Adding a partition with a valid offset cannot fail.
                let _ = tpl.add_partition_offset(topic, partition, Offset::Offset(next));
            }
        }
        super::stream_time::annotate(&mut tpl, &self.env.layout, |id| {
            self.tasks.get(&id).map(TaskInstance::stream_time)
        });
        tpl
    }

    /// Commits everything processed since the last commit. See the module docs.
    fn commit(&mut self, consumer: &BaseConsumer<RebalanceContext>) -> Result<(), TxnError> {
        if !self.dirty {
            return Ok(());
        }
        let started = Instant::now();
        super::collector::flush(&self.producer, TXN_TIMEOUT)
            .map_err(|e| self.classify("flushing the producer", e))?;
        if let Some(error) = self.events.take_error() {
            return Err(TxnError::Abort(StreamsError::kafka(
                "delivering records",
                error,
            )));
        }
        let offsets = self.offsets_list();
        if self.exactly_once() {
            let metadata = consumer.group_metadata().ok_or_else(|| {
                TxnError::Abort(StreamsError::kafka(
                    "reading the consumer group metadata",
                    KafkaError::ConsumerCommit(RDKafkaErrorCode::UnknownMemberId),
                ))
            })?;
            if offsets.count() > 0 {
                self.producer
                    .send_offsets_to_transaction(&offsets, &metadata, TXN_TIMEOUT)
                    .map_err(|e| self.classify("sending offsets to the transaction", e))?;
            }
            self.producer
                .commit_transaction(TXN_TIMEOUT)
                .map_err(|e| self.classify("committing the transaction", e))?;
            self.txn_open = false;
        }
        let events = self.events.clone();
        for (id, task) in self.tasks.iter_mut() {
            let partition = id.partition;
            task.commit(|topic| events.changelog_offset(topic, partition))
                .map_err(|e| TxnError::Fatal(e.into()))?;
        }
        if !self.exactly_once() && offsets.count() > 0 {
            consumer
                .commit(&offsets, CommitMode::Sync)
                .map_err(|e| TxnError::Abort(StreamsError::kafka("committing offsets", e)))?;
        }
        self.note_purgeable();
        self.offsets.clear();
        self.dirty = false;
        self.meter.commit_done(started, self.exactly_once());
        tracing::debug!(
            thread = self.thread,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "committed"
        );
        Ok(())
    }

    /// Remembers the just-committed offsets of repartition topics and hands
    /// them to the purger once per `repartition_purge_interval_ms`.
    fn note_purgeable(&mut self) {
        let layout = &self.env.layout;
        for (topic, partitions) in &self.offsets {
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
        tracing::debug!(thread = self.thread, txn_open = self.txn_open, "aborting");
        if self.txn_open {
            self.meter.transaction_aborted();
            // librdkafka waits for the delivery reports of purged records
            // before it aborts, and a BaseProducer only delivers them while
            // polled: purge, serve them, then abort.
            self.producer
                .purge(PurgeConfig::default().queue().inflight());
            let _ = self.producer.flush(Duration::from_secs(5));
            if let Err(e) = self.producer.abort_transaction(TXN_TIMEOUT) {
                tracing::warn!(error = %e, "aborting the transaction failed");
            }
            self.txn_open = false;
        }
        let _ = self.events.take_error();
        for task in self.tasks.values_mut() {
            task.abort();
        }
        self.offsets.clear();
        self.dirty = false;
    }

    fn close_tasks(&mut self) {
        self.meter.tasks_closed();
        for (id, mut task) in std::mem::take(&mut self.tasks) {
            if let Err(e) = task.close() {
                tracing::warn!(task = %id, error = %e, "closing task failed");
            }
            self.env.standbys.release(id);
        }
    }

    /// Creates, restores and initializes the tasks of the current assignment,
    /// each from the stream time of the last commit (`super::stream_time`).
    fn open_tasks(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
    ) -> Result<(), StreamsError> {
        let mut ids: Vec<TaskId> = self
            .assignment
            .iter()
            .filter_map(|(topic, partition)| {
                self.env
                    .layout
                    .subtopology_of_topic
                    .get(topic)
                    .map(|&sub| TaskId {
                        subtopology: sub,
                        partition: *partition,
                    })
            })
            .collect();
        ids.sort();
        ids.dedup();
        let now = wall_clock_ms();
        let stream_times = super::stream_time::committed_stream_times(
            consumer,
            &self.assignment,
            &self.env.layout,
            Duration::from_secs(30),
        )?;
        for id in ids {
            let mut task = match self.env.standbys.claim(id) {
                Some(standby) => {
                    tracing::info!(task = %id, "taking over the standby copy");
                    standby.into_task()?
                }
                None => {
                    let mut provider = self.env.stores.provider();
                    TaskInstance::new(
                        self.env.topology.clone(),
                        id,
                        self.env.task_config.clone(),
                        &mut provider,
                    )
                    .inspect_err(|_| self.env.standbys.release(id))?
                }
            };
            let started = Instant::now();
            let mut meter = RestoreMeter::start(self.env.metrics.clone(), id.to_string());
            let stats = restore_task(
                &mut task,
                &self.restore_consumer,
                Duration::from_secs(300),
                &mut meter,
            )?;
            drop(meter);
            if stats.changelog_size > 0 {
                tracing::info!(
                    task = %id,
                    restored = stats.restored,
                    changelog_records = stats.changelog_size,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "restored task"
                );
            }
            if let Some(&time) = stream_times.get(&id) {
                task.restore_stream_time(time)?;
            }
            self.begin_if_needed().map_err(TxnError::into_error)?;
            let mut collector = KafkaCollector {
                producer: &self.producer,
                partitions: &self.env.layout.partitions,
            };
            task.initialize(now, &mut collector)?;
            self.tasks.insert(id, task);
        }
        Ok(())
    }

    /// Recovers from an abortable error: abort, rebuild tasks from their
    /// committed state, and rewind the consumer to the committed offsets.
    fn recover(
        &mut self,
        consumer: &BaseConsumer<RebalanceContext>,
        cause: &StreamsError,
    ) -> Result<(), StreamsError> {
        tracing::warn!(thread = self.thread, error = %cause, "aborting the transaction and rewinding to the last commit");
        self.abort();
        self.close_tasks();
        self.generation += 1;
        let mut assigned = TopicPartitionList::new();
        for (topic, partition) in &self.assignment {
            let _ = assigned.add_partition(topic, *partition);
        }
        let committed = consumer
            .committed_offsets(assigned, Duration::from_secs(30))
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
            .seek_partitions(rewind, Duration::from_secs(30))
            .map_err(|e| StreamsError::kafka("rewinding to the committed offsets", e))?;
        self.open_tasks(consumer)
    }
}

enum TxnError {
    Abort(StreamsError),
    Fatal(StreamsError),
}

impl TxnError {
    fn into_error(self) -> StreamsError {
        match self {
            TxnError::Abort(e) | TxnError::Fatal(e) => e,
        }
    }
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The consumer's context: runs the rebalance protocol against [`Core`].
pub(crate) struct RebalanceContext {
    core: Arc<Mutex<Option<Core>>>,
    env: Arc<ThreadEnv>,
    lag: LagMeter,
}

impl ClientContext for RebalanceContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.lag.update(&statistics);
    }
}

impl RebalanceContext {
    fn lock(&self) -> MutexGuard<'_, Option<Core>> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter_rebalance(&self, core: &mut Core) {
        core.meter.rebalance_started();
        if !core.in_rebalance {
            core.in_rebalance = true;
            self.env.rebalancing.fetch_add(1, Ordering::SeqCst);
            self.env.state.transition(AppState::Rebalancing);
        }
    }

    fn leave_rebalance(&self, core: &mut Core) {
        core.meter.rebalance_finished();
        if core.in_rebalance {
            core.in_rebalance = false;
            if self.env.rebalancing.fetch_sub(1, Ordering::SeqCst) == 1 {
                self.env.state.transition(AppState::Running);
            }
        }
    }
}

impl ConsumerContext for RebalanceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut guard = self.lock();
        let Some(core) = guard.as_mut() else { return };
        match rebalance {
            Rebalance::Revoke(_) => {
                let _span =
                    tracing::info_span!("rebalance", thread = core.thread, phase = "revoke")
                        .entered();
                self.enter_rebalance(core);
                if consumer.assignment_lost() {
                    tracing::warn!("assignment lost: aborting instead of committing");
                    core.abort();
                } else {
                    match core.commit(consumer) {
                        Ok(()) => {}
                        Err(TxnError::Abort(e)) => {
                            tracing::warn!(error = %e, "commit on revoke failed; aborting");
                            core.abort();
                        }
                        Err(TxnError::Fatal(e)) => {
                            core.abort();
                            core.fatal.get_or_insert(e);
                        }
                    }
                }
                core.close_tasks();
                core.assignment.clear();
                core.generation += 1;
            }
            Rebalance::Assign(_) => self.enter_rebalance(core),
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance error"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut guard = self.lock();
        let Some(core) = guard.as_mut() else { return };
        if let Rebalance::Assign(tpl) = rebalance {
            let _span =
                tracing::info_span!("rebalance", thread = core.thread, phase = "assign").entered();
            core.generation += 1;
            core.assignment = tpl
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            tracing::info!(partitions = core.assignment.len(), "assigned");
            if let Err(e) = core.open_tasks(consumer) {
                core.fatal.get_or_insert(e);
            }
            self.leave_rebalance(core);
        }
    }
}

/// Runs stream thread `index` until shutdown or a fatal error.
pub(crate) fn run(env: Arc<ThreadEnv>, index: usize, process_id: &str) -> Result<(), StreamsError> {
    let config = &env.config;
    let app = &config.application_id;
    let transactional_id = config
        .is_exactly_once()
        .then(|| format!("{app}-{process_id}-{index}"));
    let events = Arc::new(ProducerEvents::default());
    let producer = super::clients::producer(config, transactional_id.as_deref(), events.clone())?;
    if transactional_id.is_some() {
        producer.init_transactions(TXN_TIMEOUT).map_err(|e| {
            StreamsError::kafka("initializing transactions (fencing older instances)", e)
        })?;
    }
    let restore_consumer = super::clients::restore_consumer(config)?;
    let core = Arc::new(Mutex::new(Some(Core {
        env: env.clone(),
        thread: index,
        producer,
        events,
        restore_consumer,
        tasks: BTreeMap::new(),
        offsets: HashMap::new(),
        txn_open: false,
        dirty: false,
        generation: 0,
        assignment: Vec::new(),
        fatal: None,
        in_rebalance: false,
        meter: ThreadMeter::new(env.metrics.clone(), index),
        purgeable: PurgeOffsets::new(),
        last_purge: Instant::now(),
    })));
    let context = RebalanceContext {
        core: core.clone(),
        env: env.clone(),
        lag: LagMeter::new(env.metrics.clone()),
    };
    let consumer: BaseConsumer<RebalanceContext> =
        super::clients::consumer(config, index, process_id, context)?;
    let topics = env.layout.source_topics();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topic_refs)
        .map_err(|e| StreamsError::kafka(format!("subscribing to {topics:?}"), e))?;
    {
        let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
        let c = guard.as_mut().expect("core present");
        c.in_rebalance = true;
        env.rebalancing.fetch_add(1, Ordering::SeqCst);
    }

    let result = main_loop(&env, &core, &consumer);

    // Shut down: commit what was processed, close the tasks, leave the group.
    tracing::debug!(
        thread = index,
        ok = result.is_ok(),
        "stream thread stopping"
    );
    let mut guard = core.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = guard.as_mut() {
        if result.is_ok() {
            if let Err(e) = c.commit(&consumer) {
                tracing::warn!(error = %e.into_error(), "final commit failed; aborting");
                c.abort();
            }
        } else {
            c.abort();
        }
        c.close_tasks();
        c.assignment.clear();
    }
    drop(guard);
    tracing::debug!(thread = index, "tasks closed; leaving the group");
    consumer.unsubscribe();
    drop(consumer);
    tracing::debug!(thread = index, "left the group");
    result
}

fn main_loop<'c>(
    env: &Arc<ThreadEnv>,
    core: &Arc<Mutex<Option<Core>>>,
    consumer: &'c BaseConsumer<RebalanceContext>,
) -> Result<(), StreamsError> {
    let poll_timeout = Duration::from_millis(env.config.poll_ms);
    let max_idle = Duration::from_millis(env.config.max_task_idle_ms);
    let commit_interval = env.config.commit_interval();
    let mut last_commit = Instant::now();
    let mut buffers: TaskBuffers<BorrowedMessage<'c>> =
        TaskBuffers::new(env.config.buffered_records_per_partition, max_idle);
    // The generation the buffers were filled under.
    let mut buffered_generation = u64::MAX;
    let mut batch: Vec<BorrowedMessage<'c>> = Vec::with_capacity(MAX_BATCH);
    let empty_headers = Headers::new();
    loop {
        if env.shutdown.load(Ordering::SeqCst) {
            return Ok(());
        }
        let generation = lock_core(core).as_ref().map_or(0, |c| c.generation);
        // Poll without holding the core: rebalance callbacks run in here.
        // Don't wait when buffered records can be processed right away.
        let timeout = if buffers.len() > 0 && !buffers.waiting() {
            Duration::ZERO
        } else if buffers.waiting() {
            poll_timeout.min(max_idle)
        } else {
            poll_timeout
        };
        batch.clear();
        let poll_started = Instant::now();
        if let Some(first) = consumer.poll(timeout) {
            batch.push(first.map_err(|e| StreamsError::kafka("polling", e))?);
            while batch.len() < MAX_BATCH {
                match consumer.poll(Duration::ZERO) {
                    Some(m) => batch.push(m.map_err(|e| StreamsError::kafka("polling", e))?),
                    None => break,
                }
            }
        }
        let mut guard = lock_core(core);
        let c = guard.as_mut().expect("core present");
        c.meter.poll_done(poll_started);
        if let Some(e) = c.fatal.take() {
            return Err(e);
        }
        if c.generation != generation {
            // A rebalance happened while polling: the batch belongs to
            // revoked tasks (rdkafka returns from poll after a rebalance).
            batch.clear();
        }
        if c.generation != buffered_generation {
            // New assignment or a rewind: buffered records are fetched again
            // from the committed offsets.
            reset_buffers(c, &mut buffers, consumer);
            buffered_generation = c.generation;
        }
        for message in batch.drain(..) {
            let Some(&sub) = env.layout.subtopology_of_topic.get(message.topic()) else {
                continue;
            };
            let id = TaskId {
                subtopology: sub,
                partition: message.partition(),
            };
            let (topic, partition) = (message.topic().to_owned(), message.partition());
            buffers.push(id, &topic, partition, message);
        }
        // Processing and punctuation output both need the transaction
        // (beginning one is local to librdkafka until a record is sent).
        if let Err(e) = c.begin_if_needed() {
            match e {
                TxnError::Abort(e) => {
                    c.recover(consumer, &e)?;
                    continue;
                }
                TxnError::Fatal(e) => return Err(e),
            }
        }
        if buffers.len() > 0 {
            let Core {
                tasks,
                producer,
                offsets,
                env: core_env,
                meter,
                dirty,
                ..
            } = &mut *c;
            let mut collector = KafkaCollector {
                producer,
                partitions: &core_env.layout.partitions,
            };
            let ready = buffers.tasks_with_records();
            let now = Instant::now();
            let mut failed = None;
            'tasks: for id in ready {
                let Some(task) = tasks.get_mut(&id) else {
                    continue;
                };
                // A task drains what it can take now, so buffers fill (and
                // partitions pause) only while a task waits for an empty
                // partition or falls behind a poll round.
                loop {
                    let Some(message) = buffers.next(id, now) else {
                        break;
                    };
                    let topic = message.topic();
                    let owned_headers;
                    let headers = match message.headers() {
                        Some(h) if h.count() > 0 => {
                            owned_headers = convert_headers(h);
                            &owned_headers
                        }
                        _ => &empty_headers,
                    };
                    let input = InputRecord {
                        topic,
                        partition: message.partition(),
                        offset: message.offset(),
                        timestamp: message.timestamp().to_millis().unwrap_or(-1),
                        headers,
                        key: message.key(),
                        value: message.payload(),
                    };
                    *dirty = true;
                    if let Err(e) = task.process(&input, &mut collector) {
                        failed = Some(e);
                        break 'tasks;
                    }
                    meter.record(id, input.timestamp);
                    let partitions = match offsets.get_mut(topic) {
                        Some(p) => p,
                        None => offsets.entry(topic.to_string()).or_default(),
                    };
                    partitions.insert(message.partition(), message.offset() + 1);
                }
            }
            if let Some(e) = failed {
                return Err(e.into());
            }
            set_paused(consumer, &buffers.take_drained(&env.buffer_stats), false);
        }
        // What the tasks could not take now (they wait for an empty
        // partition) stays buffered; a partition at the bound stops fetching.
        set_paused(consumer, &buffers.take_full(&env.buffer_stats), true);
        // Wall-clock punctuation.
        let now = wall_clock_ms();
        {
            let Core {
                tasks,
                producer,
                env: core_env,
                ..
            } = c;
            let mut collector = KafkaCollector {
                producer,
                partitions: &core_env.layout.partitions,
            };
            let mut punctuated = false;
            for task in tasks.values_mut() {
                if task.punctuate_wall_clock(now, &mut collector)? > 0 {
                    punctuated = true;
                }
            }
            if punctuated {
                c.dirty = true;
            }
        }
        c.meter
            .batch_done(c.tasks.iter().map(|(id, t)| (id, t.metrics())));
        if last_commit.elapsed() >= commit_interval {
            last_commit = Instant::now();
            match c.commit(consumer) {
                Ok(()) => {}
                Err(TxnError::Abort(e)) => c.recover(consumer, &e)?,
                Err(TxnError::Fatal(e)) => return Err(e),
            }
        }
    }
}

/// Empties the buffers for the core's current assignment and lifts the
/// pauses of the previous one.
fn reset_buffers<M: super::buffer::Buffered>(
    core: &Core,
    buffers: &mut TaskBuffers<M>,
    consumer: &BaseConsumer<RebalanceContext>,
) {
    let layout = &core.env.layout;
    let assignment = core.assignment.iter().filter_map(|(topic, partition)| {
        let sub = *layout.subtopology_of_topic.get(topic)?;
        let id = TaskId {
            subtopology: sub,
            partition: *partition,
        };
        Some((id, topic.clone(), *partition))
    });
    let paused = buffers.reset(assignment);
    let assigned: Vec<(String, i32)> = paused
        .into_iter()
        .filter(|p| core.assignment.contains(p))
        .collect();
    set_paused(consumer, &assigned, false);
}

/// Pauses (or resumes) fetching of `partitions`.
fn set_paused(
    consumer: &BaseConsumer<RebalanceContext>,
    partitions: &[(String, i32)],
    pause: bool,
) {
    if partitions.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in partitions {
        let _ = tpl.add_partition(topic, *partition);
    }
    let result = if pause {
        consumer.pause(&tpl)
    } else {
        consumer.resume(&tpl)
    };
    match result {
        Ok(()) => tracing::debug!(
            ?partitions,
            pause,
            "buffer bound: partitions paused/resumed"
        ),
        Err(e) => {
            tracing::warn!(?partitions, pause, error = %e, "pausing/resuming partitions failed")
        }
    }
}

fn lock_core(core: &Arc<Mutex<Option<Core>>>) -> MutexGuard<'_, Option<Core>> {
    core.lock().unwrap_or_else(|p| p.into_inner())
}

fn convert_headers(headers: &rdkafka::message::BorrowedHeaders) -> Headers {
    let mut out = Headers::new();
    for header in headers.iter() {
        out.add(header.key, header.value.map(<[u8]>::to_vec));
    }
    out
}
