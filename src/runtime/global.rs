//! The global thread: loads every global table of the topology and keeps it
//! current.
//!
//! # Life cycle
//!
//! 1. [`start`] (called by `KafkaStreams::start` before any stream thread
//!    exists) opens one in-memory store per global table, assigns *all*
//!    partitions of the tables' source topics from the beginning to one
//!    consumer (no group: every instance reads everything), and reads up to
//!    each partition's end as it was at start (`read_committed`, so records
//!    of aborted transactions never appear). Only then does it return, so
//!    stream threads never process a record before the tables are loaded.
//! 2. The `weir-global` thread then keeps polling the same consumer and
//!    applies every new record (a null value deletes) until shutdown.
//!
//! Invariants: global stores are written only here and read by tasks
//! through [`crate::topology::GlobalStores`]; they are not logged (the
//! source topic is their changelog). They are in memory and re-read in
//! full at every start; keeping them on disk with per-partition
//! checkpoints is not built yet.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::StreamsError;
use super::end_of_partition::RestoreConsumer;
use crate::config::StreamsConfig;
use crate::state::memory::InMemoryKeyValueStore;
use crate::topology::{GlobalStores, Topology};

/// How long loading the global tables at start-up may take.
const LOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// Records applied between two store flushes.
const FLUSH_RECORDS: u64 = 10_000;

/// The loaded global tables and the thread that keeps them current.
pub(crate) struct Globals {
    pub(crate) stores: GlobalStores,
    pub(crate) thread: Option<JoinHandle<()>>,
}

/// Loads the global tables of `topology` and starts the global thread (see
/// the module docs). With no global table: empty stores and no thread.
pub(crate) fn start(
    config: &StreamsConfig,
    topology: &Topology,
    shutdown: Arc<AtomicBool>,
) -> Result<Globals, StreamsError> {
    let defs = topology.global_topics();
    let stores = GlobalStores::open(&defs, |name| Ok(Box::new(InMemoryKeyValueStore::new(name))))?;
    if defs.is_empty() {
        return Ok(Globals {
            stores,
            thread: None,
        });
    }
    let consumer: RestoreConsumer = super::clients::restore_consumer(config)?;
    let pending = assign_global_topics(&consumer, &defs)?;
    let applied = load(&consumer, &stores, pending, defs.len() == 1)?;
    tracing::info!(
        tables = defs.len(),
        records = applied,
        "global tables loaded"
    );
    let keep = stores.clone();
    let thread = std::thread::Builder::new()
        .name("weir-global".to_owned())
        .spawn(move || run(consumer, keep, shutdown))
        .map_err(|source| StreamsError::Io {
            context: "spawning the global thread",
            source,
        })?;
    Ok(Globals {
        stores,
        thread: Some(thread),
    })
}

/// Assigns every partition of the global topics from the beginning and
/// returns the partitions that hold records, with the offset that ends them.
fn assign_global_topics(
    consumer: &RestoreConsumer,
    defs: &[(String, String)],
) -> Result<HashMap<(String, i32), i64>, StreamsError> {
    let mut assignment = TopicPartitionList::new();
    let mut pending = HashMap::new();
    for (store, topic) in defs {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_err(|e| {
                StreamsError::kafka(format!("reading the partitions of global topic {topic}"), e)
            })?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            return Err(StreamsError::MissingSourceTopic {
                topic: format!("{topic} (source of global table '{store}')"),
            });
        }
        for p in partitions {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .map_err(|e| StreamsError::kafka("building the global assignment", e))?;
            let (low, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .map_err(|e| StreamsError::kafka(format!("reading the end of {topic}/{p}"), e))?;
            if high > low {
                pending.insert((topic.clone(), p), high);
            }
        }
    }
    consumer
        .assign(&assignment)
        .map_err(|e| StreamsError::kafka("assigning the global topics", e))?;
    Ok(pending)
}

/// Applies records until every `pending` partition reached its end, then
/// flushes the stores; returns how many records were applied. With one
/// global topic, end-of-partition events end a partition too (they name no
/// topic, so with several topics loading relies on the offsets alone).
fn load(
    consumer: &RestoreConsumer,
    stores: &GlobalStores,
    mut pending: HashMap<(String, i32), i64>,
    one_topic: bool,
) -> Result<u64, StreamsError> {
    let started = Instant::now();
    let mut applied = 0u64;
    while !pending.is_empty() {
        if started.elapsed() > LOAD_TIMEOUT {
            let left: Vec<String> = pending.keys().map(|(t, p)| format!("{t}/{p}")).collect();
            return Err(StreamsError::Timeout {
                context: format!(
                    "loading the global tables: partitions {left:?} did not reach their end; is the broker reachable?"
                ),
                after: started.elapsed(),
            });
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                apply(stores, &m)?;
                applied += 1;
                let key = (m.topic().to_owned(), m.partition());
                if pending.get(&key).is_some_and(|&end| m.offset() + 1 >= end) {
                    pending.remove(&key);
                }
            }
            // The end as read_committed sees it (before open transactions).
            Some(Err(KafkaError::PartitionEOF(p))) if one_topic => {
                pending.retain(|(_, partition), _| *partition != p);
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(StreamsError::kafka("loading the global tables", e)),
        }
    }
    for store in stores.iter() {
        store.flush()?;
    }
    Ok(applied)
}

fn apply(
    stores: &GlobalStores,
    m: &rdkafka::message::BorrowedMessage<'_>,
) -> Result<(), StreamsError> {
    let (Some(store), Some(key)) = (stores.by_topic(m.topic()), m.key()) else {
        return Ok(());
    };
    store.apply(key, m.payload())?;
    Ok(())
}

/// The global thread's loop: apply new records until shutdown.
fn run(consumer: RestoreConsumer, stores: GlobalStores, shutdown: Arc<AtomicBool>) {
    let mut since_flush = 0u64;
    while !shutdown.load(Ordering::SeqCst) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => match apply(&stores, &m) {
                Ok(()) => since_flush += 1,
                Err(e) => {
                    tracing::error!(error = %e, topic = m.topic(), offset = m.offset(), "global thread: applying a record failed; the global table stops updating");
                    return;
                }
            },
            Some(Err(KafkaError::PartitionEOF(_))) | None => {
                if since_flush > 0 {
                    flush(&stores);
                    since_flush = 0;
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "global thread: poll failed; retrying"),
        }
        if since_flush >= FLUSH_RECORDS {
            flush(&stores);
            since_flush = 0;
        }
    }
}

fn flush(stores: &GlobalStores) {
    for store in stores.iter() {
        if let Err(e) = store.flush() {
            tracing::error!(error = %e, store = store.name(), "global thread: flushing a global store failed");
        }
    }
}
