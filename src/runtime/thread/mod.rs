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

mod lifecycle;
mod process;
mod rebalance;

pub(crate) use rebalance::RebalanceContext;

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

    let result = process::main_loop(&env, &core, &consumer);

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

fn lock_core(core: &Arc<Mutex<Option<Core>>>) -> MutexGuard<'_, Option<Core>> {
    core.lock().unwrap_or_else(|p| p.into_inner())
}
