//! [`TaskInstance`]: one (sub-topology, partition) of a topology, running.
//!
//! This is the single implementation of the processing semantics: the test
//! driver and the runtime both build tasks here and call the same methods.
//!
//! # State machine
//!
//! ```text
//!  new() ──► Created ──initialize()──► Running ──close()──► Closed
//!              │  (restore stores here)   │ process / punctuate_wall_clock
//!              └──────────close()─────────┘ commit / abort
//! ```
//!
//! * `new` builds the node instances from the topology's suppliers and opens
//!   the stores through the [`StoreProvider`].
//! * Between `new` and `initialize` the runtime restores the stores from their
//!   changelogs ([`TaskInstance::restore_batch`], unlogged).
//! * `initialize` calls every processor's `init` (where they schedule
//!   punctuators), in topological order.
//! * `process` takes one input record: source → deserialize → extract
//!   timestamp → advance stream time → processors → sinks / logged store
//!   writes through the [`RecordCollector`]; then due stream-time punctuators
//!   fire. Errors go to the configured handlers ([`crate::handler`]); a
//!   returned [`TaskError`] means the caller must stop feeding the task and
//!   abort (see [`TaskError`]).
//! * `commit(offsets)` makes the stores' open writes durable together with the
//!   changelog offsets they reached; call it only after the Kafka transaction
//!   carrying the changelog records committed. `abort` drops the open writes.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::handler::{self, ErrorHandling};
use crate::topology::{NodeBuildContext, Topology};

use super::StoreProvider;
use super::collector::{OutputKind, OutputRecord, RecordCollector};
use super::error::{ProcessorError, TaskError};
use super::frame::{Frame, NodeSlot, Schedule, ScheduleOp, SourceError};
use super::punctuation::PunctuationType;
use super::store::{AnyStore, StoreCell, StoreSlot, StoreSpec};

pub mod shed;
mod stores;
mod types;

pub use types::{InputRecord, NodeMetrics, TaskConfig, TaskId, TaskMetrics, TaskState};

/// One record in this many has its node processing timed (per-node busy
/// time is estimated from them: a clock read per node and record would
/// cost more than small nodes do).
pub const NODE_SAMPLE: u64 = 16;

/// One running (sub-topology, partition). See the module docs.
pub struct TaskInstance {
    id: TaskId,
    config: TaskConfig,
    nodes: Vec<NodeSlot>,
    stores: Vec<StoreSlot>,
    sources: Vec<(String, usize)>,
    /// The source topics that are the application's own (not repartition
    /// topics): the ones load shedding applies to.
    user_sources: Vec<String>,
    shedder: shed::Shedder,
    /// Records taken since the task opened, for sampling node times.
    taken: u64,
    schedules: Vec<Schedule>,
    next_schedule_id: Cell<u64>,
    stream_time: i64,
    wall_clock_ms: i64,
    state: TaskState,
    metrics: TaskMetrics,
}

impl TaskInstance {
    /// Builds task `id` of `topology`: instantiates its processors and opens
    /// its stores through `stores`.
    pub fn new(
        topology: Arc<Topology>,
        id: TaskId,
        config: TaskConfig,
        stores: &mut dyn StoreProvider,
    ) -> Result<Self, TaskError> {
        let Some(sub) = topology.subtopologies.get(id.subtopology as usize) else {
            return Err(TaskError::UnknownSubtopology { task: id });
        };
        let app = config.application_id.as_str();
        let build = NodeBuildContext {
            application_id: app,
            globals: &config.globals,
        };
        let local_node = |global: usize| sub.nodes.iter().position(|&n| n == global);
        let local_store = |global: usize| sub.stores.iter().position(|&s| s == global);

        let mut store_slots = Vec::with_capacity(sub.stores.len());
        for &s in &sub.stores {
            let def = &topology.stores[s];
            let changelog_topic = def.logging.then(|| def.changelog_topic(app));
            let spec = StoreSpec {
                name: &def.name,
                kind: def.kind,
                retention: def.retention,
                changelog_topic: changelog_topic.as_deref(),
            };
            let backend = AnyStore::open(stores, id, &spec)
                .map_err(|source| TaskError::Store { task: id, source })?;
            store_slots.push(StoreSlot {
                name: def.name.clone(),
                changelog_topic,
                serdes: def.serdes.clone(),
                inner: RefCell::new(StoreCell::new(backend)),
            });
        }

        let mut nodes = Vec::with_capacity(sub.nodes.len());
        let mut sources = Vec::new();
        let mut user_sources = Vec::new();
        for (local, &g) in sub.nodes.iter().enumerate() {
            let def = &topology.nodes[g];
            for topic in def.source_topics() {
                sources.push((topic.resolve(app), local));
                if let crate::topology::TopicName::User(name) = topic {
                    user_sources.push(name.clone());
                }
            }
            nodes.push(NodeSlot {
                name: def.name.clone(),
                children: def.children.iter().filter_map(|&c| local_node(c)).collect(),
                stores: def.stores.iter().filter_map(|&s| local_store(s)).collect(),
                runtime: RefCell::new((def.factory)(&build)),
                stats: Default::default(),
            });
        }

        let shedder = shed::Shedder::at_level(if config.shedding.is_some() {
            config.shed_memo.level(id)
        } else {
            0.0
        });
        Ok(TaskInstance {
            id,
            config,
            nodes,
            stores: store_slots,
            sources,
            user_sources,
            shedder,
            taken: 0,
            schedules: Vec::new(),
            next_schedule_id: Cell::new(0),
            stream_time: -1,
            wall_clock_ms: 0,
            state: TaskState::Created,
            metrics: TaskMetrics::default(),
        })
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The task's state.
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// Stream time: the largest record timestamp processed, `-1` before any.
    pub fn stream_time(&self) -> i64 {
        self.stream_time
    }

    /// The task's counters.
    pub fn metrics(&self) -> TaskMetrics {
        self.metrics
    }

    /// Per node, in topological order: records taken and estimated busy
    /// time (its own, without its children's), since the task opened.
    pub fn node_metrics(&self) -> Vec<NodeMetrics<'_>> {
        let inclusive: Vec<u64> = self
            .nodes
            .iter()
            .map(|n| n.stats.timed_ns.get().saturating_mul(NODE_SAMPLE))
            .collect();
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let children: u64 = n.children.iter().map(|&c| inclusive[c]).sum();
                NodeMetrics {
                    name: &n.name,
                    records: n.stats.records.get(),
                    busy_seconds: inclusive[i].saturating_sub(children) as f64 / 1e9,
                }
            })
            .collect()
    }

    /// The full names of the topics this task reads (user and repartition topics).
    pub fn source_topics(&self) -> impl Iterator<Item = &str> {
        self.sources.iter().map(|(t, _)| t.as_str())
    }

    /// `(store, changelog topic)` for each logged store of this task.
    pub fn changelog_topics(&self) -> impl Iterator<Item = (&str, &str)> {
        self.stores
            .iter()
            .filter_map(|s| s.changelog_topic.as_deref().map(|t| (s.name.as_str(), t)))
    }

    /// The frame of one call (see `frame.rs`): the task's nodes, stores,
    /// clocks and record cache, with `collector` for what the call emits.
    /// `record` is the input record's metadata (`None` outside `process`);
    /// `timestamp` the time the call's store writes and forwards carry.
    fn frame<'a>(
        &'a self,
        collector: &'a mut dyn RecordCollector,
        input: Option<&'a InputRecord<'a>>,
        timestamp: i64,
    ) -> Frame<'a> {
        Frame {
            task: self.id,
            nodes: &self.nodes,
            stores: &self.stores,
            collector: RefCell::new(collector),
            input,
            current_timestamp: Cell::new(timestamp),
            stream_time: Cell::new(self.stream_time),
            wall_clock_ms: self.wall_clock_ms,
            schedule_ops: RefCell::new(Vec::new()),
            next_schedule_id: &self.next_schedule_id,
            failed_node: Cell::new(None),
            initializing: false,
            late_records: Cell::new(0),
            cache: &self.config.cache,
            timed: false,
        }
    }

    fn require(&self, state: TaskState, action: &'static str) -> Result<(), TaskError> {
        if self.state == state {
            Ok(())
        } else {
            Err(TaskError::State {
                task: self.id,
                action,
                state: self.state,
            })
        }
    }

    /// Initializes the processors (they may schedule punctuators and write
    /// stores). `wall_clock_ms` is the current wall-clock time.
    pub fn initialize(
        &mut self,
        wall_clock_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), TaskError> {
        self.require(TaskState::Created, "initialize")?;
        self.wall_clock_ms = wall_clock_ms;
        let mut ops = Vec::new();
        for node in 0..self.nodes.len() {
            let mut f = self.frame(&mut *collector, None, self.stream_time);
            f.initializing = true;
            let result = self.nodes[node].runtime.borrow_mut().init(&f, node);
            ops.extend(f.schedule_ops.take());
            if let Err(source) = result {
                return Err(TaskError::Init {
                    task: self.id,
                    node: self.nodes[node].name.clone(),
                    source: Box::new(source),
                });
            }
        }
        self.apply_schedule_ops(ops);
        self.state = TaskState::Running;
        Ok(())
    }

    /// Processes one input record, then fires due stream-time punctuators.
    /// See the module docs for the steps and error handling.
    pub fn process(
        &mut self,
        input: &InputRecord<'_>,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), TaskError> {
        self.require(TaskState::Running, "process records")?;
        let Some(&(_, source_node)) = self.sources.iter().find(|(t, _)| t == input.topic) else {
            return Err(TaskError::UnknownTopic {
                task: self.id,
                topic: input.topic.to_owned(),
                sources: self.sources.iter().map(|(t, _)| t.clone()).collect(),
            });
        };
        if self.shed(input, collector)? {
            return Ok(());
        }
        self.taken += 1;
        let timed = self.taken.is_multiple_of(NODE_SAMPLE);
        let (result, failed_node, ops, stream_time, late) = {
            let mut f = self.frame(&mut *collector, Some(input), input.timestamp);
            f.timed = timed;
            let started = timed.then(std::time::Instant::now);
            let result =
                self.nodes[source_node]
                    .runtime
                    .borrow_mut()
                    .process_input(&f, source_node, input);
            self.nodes[source_node].stats.note(started);
            (
                result,
                f.failed_node.get(),
                f.schedule_ops.take(),
                f.stream_time.get(),
                f.late_records.get(),
            )
        };
        self.stream_time = stream_time;
        self.metrics.late_dropped += late;
        self.apply_schedule_ops(ops);
        match result {
            Ok(()) => self.metrics.processed += 1,
            Err(SourceError::Deserialize { what, source }) => {
                let error = TaskError::Deserialization {
                    task: self.id,
                    topic: input.topic.to_owned(),
                    partition: input.partition,
                    offset: input.offset,
                    what,
                    source,
                };
                self.handle_record_error(true, "deserialization", error, input, collector)?;
            }
            Err(SourceError::InvalidTimestamp(timestamp)) => {
                let error = TaskError::InvalidTimestamp {
                    task: self.id,
                    topic: input.topic.to_owned(),
                    partition: input.partition,
                    offset: input.offset,
                    timestamp,
                };
                self.handle_record_error(true, "invalid-timestamp", error, input, collector)?;
            }
            // The collector refused output (a producer error): not the
            // record's fault, so not for the processing handler, which could
            // skip the record and lose its output. The runtime classifies it.
            Err(SourceError::Processing(ProcessorError::Collector(source))) => {
                return Err(TaskError::Collector {
                    task: self.id,
                    source,
                });
            }
            Err(SourceError::Processing(source)) => {
                let node = failed_node.unwrap_or(source_node);
                let error = TaskError::Processing {
                    task: self.id,
                    topic: input.topic.to_owned(),
                    partition: input.partition,
                    offset: input.offset,
                    node: self.nodes[node].name.clone(),
                    source: Box::new(source),
                };
                self.handle_record_error(false, "processing", error, input, collector)?;
            }
        }
        self.run_punctuators(PunctuationType::StreamTime, self.stream_time, collector)?;
        Ok(())
    }

    /// Reports wall-clock time `now_ms` and fires due wall-clock punctuators.
    /// Returns how many fired.
    pub fn punctuate_wall_clock(
        &mut self,
        now_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<usize, TaskError> {
        self.require(TaskState::Running, "punctuate")?;
        self.wall_clock_ms = now_ms;
        self.run_punctuators(PunctuationType::WallClockTime, now_ms, collector)
    }

    /// Load shedding ([`shed`]): `true` when the record was shed (counted
    /// and, with a shed topic, written there).
    fn shed(
        &mut self,
        input: &InputRecord<'_>,
        collector: &mut dyn RecordCollector,
    ) -> Result<bool, TaskError> {
        let Some(shedding) = &self.config.shedding else {
            return Ok(false);
        };
        if !self.user_sources.iter().any(|t| t == input.topic) {
            return Ok(false);
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let verdict = self.shedder.decide(shedding, input, now_ms);
        let memo = &self.config.shed_memo;
        // A record processed again after an abort is decided as before.
        let verdict = match memo.recall(self.id, input) {
            Some(false) => shed::Verdict::Keep,
            Some(true) => match verdict {
                shed::Verdict::Shed { .. } => verdict,
                shed::Verdict::Keep => shed::Verdict::Shed {
                    lag_ms: now_ms - input.timestamp,
                    level: Some(self.shedder.level()),
                },
            },
            None => {
                let shed = matches!(verdict, shed::Verdict::Shed { .. });
                memo.note(self.id, input, shed, self.shedder.level());
                verdict
            }
        };
        let shed::Verdict::Shed { lag_ms, level } = verdict else {
            return Ok(false);
        };
        if let Some(topic) = &shedding.topic {
            let mut headers = input.headers.clone();
            let reason = match level {
                Some(level) => format!(
                    "chosen by the {:?} policy at shed level {level:.2} (lag {lag_ms} ms, bound {} ms)",
                    shedding.policy, shedding.max_lag_ms
                ),
                None => format!(
                    "its lag {lag_ms} ms is over the bound {} ms",
                    shedding.max_lag_ms
                ),
            };
            headers.add(shed::HEADER_REASON, Some(reason.into_bytes()));
            let coordinates = [
                shed::HEADER_TOPIC,
                shed::HEADER_PARTITION,
                shed::HEADER_OFFSET,
            ];
            self.set_aside(topic, input, headers, coordinates, collector)?;
        }
        self.metrics.shed += 1;
        Ok(true)
    }

    /// Writes `input` as it came to `topic` (a dead-letter or shed
    /// topic), with `headers` plus its coordinates under the names in
    /// `coordinates` (topic, partition, offset).
    fn set_aside(
        &self,
        topic: &str,
        input: &InputRecord<'_>,
        mut headers: crate::processor::Headers,
        coordinates: [&str; 3],
        collector: &mut dyn RecordCollector,
    ) -> Result<(), TaskError> {
        let [topic_key, partition_key, offset_key] = coordinates;
        headers
            .add(topic_key, Some(input.topic.as_bytes().to_vec()))
            .add(
                partition_key,
                Some(input.partition.to_string().into_bytes()),
            )
            .add(offset_key, Some(input.offset.to_string().into_bytes()));
        collector
            .send(OutputRecord {
                topic,
                partition: None,
                key: input.key,
                value: input.value,
                timestamp: input.timestamp,
                headers: &headers,
                kind: OutputKind::DeadLetter,
            })
            .map_err(|source| TaskError::Collector {
                task: self.id,
                source,
            })
            .map(|_| ())
    }

    fn handle_record_error(
        &mut self,
        deserialization: bool,
        kind: &str,
        error: TaskError,
        input: &InputRecord<'_>,
        collector: &mut dyn RecordCollector,
    ) -> Result<(), TaskError> {
        let handling = if deserialization {
            &self.config.deserialization_handler
        } else {
            &self.config.processing_handler
        };
        match handling {
            ErrorHandling::LogAndFail => {
                tracing::error!(task = %self.id, error = %error, "stopping the task");
                return Err(error);
            }
            ErrorHandling::LogAndContinue => {
                tracing::warn!(task = %self.id, error = %error, "skipping the record");
            }
            ErrorHandling::DeadLetter { topic } => {
                tracing::warn!(task = %self.id, error = %error, dead_letter_topic = %topic, "dead-lettering the record");
                let mut headers = input.headers.clone();
                headers
                    .add(handler::HEADER_EXCEPTION, Some(kind.as_bytes().to_vec()))
                    .add(
                        handler::HEADER_MESSAGE,
                        Some(error.to_string().into_bytes()),
                    );
                let coordinates = [
                    handler::HEADER_TOPIC,
                    handler::HEADER_PARTITION,
                    handler::HEADER_OFFSET,
                ];
                self.set_aside(topic, input, headers, coordinates, collector)?;
                self.metrics.dead_lettered += 1;
            }
        }
        if deserialization {
            self.metrics.skipped_deserialization += 1;
        } else {
            self.metrics.skipped_processing += 1;
        }
        Ok(())
    }

    fn run_punctuators(
        &mut self,
        kind: PunctuationType,
        now_ms: i64,
        collector: &mut dyn RecordCollector,
    ) -> Result<usize, TaskError> {
        let mut fired = 0;
        let mut late = 0;
        let mut skipped = 0;
        let mut ops = Vec::new();
        let mut failure = None;
        // Taken out for the loop, as the frames borrow the task; a callback
        // changes schedules only through `ops`.
        let mut schedules = std::mem::take(&mut self.schedules);
        for schedule in schedules.iter_mut() {
            if schedule.kind != kind || !schedule.timing.due(now_ms) {
                continue;
            }
            schedule.timing.advance(now_ms);
            let f = self.frame(&mut *collector, None, now_ms);
            let result = (schedule.callback)(&f, schedule.node, now_ms);
            ops.extend(f.schedule_ops.take());
            late += f.late_records.get();
            fired += 1;
            if let Err(source) = result {
                let error = TaskError::Punctuation {
                    task: self.id,
                    node: self.nodes[schedule.node].name.clone(),
                    timestamp: now_ms,
                    source: Box::new(source),
                };
                if self.config.processing_handler == ErrorHandling::LogAndFail {
                    failure = Some(error);
                    break;
                }
                tracing::warn!(task = %self.id, error = %error, "skipping the failed punctuation");
                skipped += 1;
            }
        }
        self.schedules = schedules;
        self.metrics.late_dropped += late;
        self.metrics.skipped_processing += skipped;
        self.metrics.punctuations += fired as u64;
        self.apply_schedule_ops(ops);
        match failure {
            Some(error) => Err(error),
            None => Ok(fired),
        }
    }

    fn apply_schedule_ops(&mut self, ops: Vec<ScheduleOp>) {
        for op in ops {
            match op {
                ScheduleOp::Add(s) => self.schedules.push(s),
                ScheduleOp::Cancel(id) => self.schedules.retain(|s| s.id != id),
            }
        }
    }

    /// Commits every store's open writes with the changelog offset it reached
    /// (`changelog_offset(topic)`: the offset of the last record the collector
    /// sent to that changelog topic, if any). Call after the transaction committed.
    pub fn commit(
        &mut self,
        changelog_offset: impl Fn(&str) -> Option<i64>,
    ) -> Result<(), TaskError> {
        for slot in &self.stores {
            let offset = slot.changelog_topic.as_deref().and_then(&changelog_offset);
            slot.inner
                .borrow_mut()
                .store
                .state_mut()
                .commit(offset)
                .map_err(|source| TaskError::Store {
                    task: self.id,
                    source,
                })?;
        }
        // The decisions of load shedding up to here are final.
        if self.config.shedding.is_some() {
            self.config.shed_memo.committed(self.id);
        }
        Ok(())
    }

    /// Forwards what the aggregations held in the record cache, writing it
    /// to their stores (and changelogs) on the way. Call before committing
    /// the transaction, so the output and changelog records join it.
    /// A task that is not running holds nothing: flushing it does nothing.
    pub fn flush(&mut self, collector: &mut dyn RecordCollector) -> Result<(), TaskError> {
        if self.state != TaskState::Running {
            return Ok(());
        }
        // Node indices are topological: what a node flushes reaches its
        // children before they flush.
        for node in 0..self.nodes.len() {
            let f = self.frame(&mut *collector, None, self.stream_time);
            let result = self.nodes[node].runtime.borrow_mut().flush(&f, node);
            if let Err(source) = result {
                let failed = f.failed_node.get().unwrap_or(node);
                return Err(TaskError::Flush {
                    task: self.id,
                    node: self.nodes[failed].name.clone(),
                    source: Box::new(source),
                });
            }
        }
        Ok(())
    }

    /// Discards every store's writes since the last commit and what the
    /// record cache held (the transaction aborted).
    pub fn abort(&mut self) {
        for node in &self.nodes {
            node.runtime.borrow_mut().discard();
        }
        for slot in &self.stores {
            slot.inner.borrow_mut().store.state_mut().abort();
        }
    }

    /// Closes processors and stores (open writes are discarded: commit first).
    pub fn close(&mut self) -> Result<(), TaskError> {
        if self.state == TaskState::Closed {
            return Ok(());
        }
        if self.state == TaskState::Running {
            for node in &self.nodes {
                node.runtime.borrow_mut().close();
            }
        }
        self.state = TaskState::Closed;
        for slot in &self.stores {
            slot.inner
                .borrow_mut()
                .store
                .state_mut()
                .close()
                .map_err(|source| TaskError::Store {
                    task: self.id,
                    source,
                })?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for TaskInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskInstance")
            .field("id", &self.id)
            .field("state", &self.state)
            .field("stream_time", &self.stream_time)
            .field(
                "nodes",
                &self
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[allow(unused)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<TaskInstance>();
}
