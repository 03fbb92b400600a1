//! The ceiling: a hand-written rdkafka consume → transform → produce loop
//! with the same guarantees as the frameworks and none of their machinery.
//!
//! One consumer (all input partitions), one producer, batches of up to 1,000
//! records; librdkafka batches underneath (fetches of up to 1 MiB per
//! partition, produce batches after `linger.ms`). The consumer prefetches
//! as Weir's does (`queued.min.messages` 10,000, 16 MiB, and a 20 ms
//! `fetch.queue.backoff.ms`): with librdkafka's defaults a partition whose
//! prefetch queue was full waited 1 s before its next fetch, and this loop
//! ran at 150,000 records/s, a quarter of what it does now. Every commit interval: flush; under exactly-once also
//! `send_offsets_to_transaction` + `commit_transaction` (one transaction per
//! interval, begun before the first record of the next one); under
//! at-least-once a synchronous offset commit. The stateful workloads keep
//! their counts in a `HashMap` (no store, no changelog: this is the ceiling,
//! not an equal) and emit each key updated in the interval once per commit,
//! as the frameworks' record caches do. The join workload subscribes to the
//! table topic too and keeps the latest profile per key in a `HashMap`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::workload::{self, Event, Profile};

/// What the raw loop runs.
pub struct RawArgs {
    pub workload: String,
    pub exactly_once: bool,
    pub commit_ms: u64,
    pub input: String,
    pub output: String,
    pub table: String,
    pub app_id: String,
    pub bootstrap: String,
}

const TXN_TIMEOUT: Duration = Duration::from_secs(60);

fn send(producer: &BaseProducer, mut record: BaseRecord<'_, [u8], [u8]>) -> Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e).context("producing"),
        }
    }
}

/// Waits until every record sent is acknowledged and its delivery report
/// served: Weir's own flush (`weir::runtime::flush_producer`), the fastest
/// librdkafka allows through rdkafka 0.39 (it serves every waiting report
/// per round, where `poll(0)` serves one, and sends lingering records at
/// once), so the ceiling is not held back by a slower one.
pub fn flush(producer: &BaseProducer, timeout: Duration) -> Result<()> {
    weir::runtime::flush_producer(producer, timeout).with_context(|| {
        format!(
            "flushing ({} records in flight)",
            producer.in_flight_count()
        )
    })
}

/// Runs until `stop` is set.
pub fn run(args: &RawArgs, stop: Arc<AtomicBool>) -> Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", &args.app_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("queued.min.messages", "10000")
        .set("queued.max.messages.kbytes", "16384")
        .set("fetch.queue.backoff.ms", "20")
        .set(
            "isolation.level",
            if args.exactly_once {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        )
        .create()
        .context("creating the consumer")?;
    let mut pc = ClientConfig::new();
    pc.set("bootstrap.servers", &args.bootstrap)
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    if args.exactly_once {
        pc.set("transactional.id", format!("{}-raw", args.app_id))
            .set("transaction.timeout.ms", "10000");
    }
    let producer: BaseProducer = pc.create().context("creating the producer")?;
    if args.exactly_once {
        producer.init_transactions(TXN_TIMEOUT)?;
    }
    if args.workload == "join" {
        consumer.subscribe(&[&args.input, &args.table])?;
    } else {
        consumer.subscribe(&[&args.input])?;
    }

    let commit_interval = Duration::from_millis(args.commit_ms);
    let mut last_commit = Instant::now();
    let mut txn_open = false;
    // count: key → (count, timestamp); window: (key, start) → (count, timestamp).
    let mut counts: HashMap<Vec<u8>, (i64, i64)> = HashMap::new();
    let mut dirty: HashSet<Vec<u8>> = HashSet::new();
    let mut profiles: HashMap<Vec<u8>, Profile> = HashMap::new();
    // (topic, partition) → next offset.
    let mut offsets: HashMap<(bool, i32), i64> = HashMap::new();
    let mut out = Vec::with_capacity(1024);
    let mut batch = Vec::with_capacity(1000);
    while !stop.load(Ordering::Relaxed) {
        batch.clear();
        if let Some(first) = consumer.poll(Duration::from_millis(100)) {
            batch.push(first?);
            while batch.len() < 1000 {
                match consumer.poll(Duration::ZERO) {
                    Some(m) => batch.push(m?),
                    None => break,
                }
            }
        }
        if args.exactly_once && !txn_open && !batch.is_empty() {
            producer.begin_transaction()?;
            txn_open = true;
        }
        for m in &batch {
            let ts = m.timestamp().to_millis().unwrap_or(0);
            let key = m.key().unwrap_or_default();
            let value = m.payload().unwrap_or_default();
            let from_table = m.topic() == args.table;
            offsets.insert((from_table, m.partition()), m.offset() + 1);
            if from_table {
                profiles.insert(key.to_vec(), serde_json::from_slice(value)?);
                continue;
            }
            match args.workload.as_str() {
                "passthrough" => send(
                    &producer,
                    BaseRecord::to(&args.output)
                        .key(key)
                        .payload(value)
                        .timestamp(ts),
                )?,
                "stateless" => {
                    let e: Event = serde_json::from_slice(value)?;
                    if workload::keep(&e) {
                        out.clear();
                        serde_json::to_writer(&mut out, &workload::enrich(e))?;
                        send(
                            &producer,
                            BaseRecord::to(&args.output)
                                .key(key)
                                .payload(&out[..])
                                .timestamp(ts),
                        )?;
                    }
                }
                "count" | "window" => {
                    let k = if args.workload == "count" {
                        key.to_vec()
                    } else {
                        workload::window_key(std::str::from_utf8(key)?, ts)
                    };
                    let entry = counts.entry(k.clone()).or_insert((0, ts));
                    entry.0 += 1;
                    entry.1 = entry.1.max(ts);
                    dirty.insert(k);
                }
                "join" => {
                    let e: Event = serde_json::from_slice(value)?;
                    if let Some(p) = profiles.get(key) {
                        out.clear();
                        serde_json::to_writer(&mut out, &workload::join(&e, p))?;
                        send(
                            &producer,
                            BaseRecord::to(&args.output)
                                .key(key)
                                .payload(&out[..])
                                .timestamp(ts),
                        )?;
                    }
                }
                other => anyhow::bail!("unknown workload {other}"),
            }
        }
        producer.poll(Duration::ZERO);
        if last_commit.elapsed() >= commit_interval && !offsets.is_empty() {
            last_commit = Instant::now();
            if args.exactly_once && !txn_open {
                producer.begin_transaction()?;
                txn_open = true;
            }
            for k in dirty.drain() {
                let (count, ts) = counts[&k];
                send(
                    &producer,
                    BaseRecord::to(&args.output)
                        .key(&k[..])
                        .payload(&count.to_be_bytes()[..])
                        .timestamp(ts),
                )?;
            }
            flush(&producer, TXN_TIMEOUT)?;
            let mut tpl = TopicPartitionList::new();
            for (&(from_table, p), &o) in &offsets {
                let topic = if from_table { &args.table } else { &args.input };
                tpl.add_partition_offset(topic, p, Offset::Offset(o))?;
            }
            if args.exactly_once {
                let meta = consumer
                    .group_metadata()
                    .context("reading group metadata")?;
                producer.send_offsets_to_transaction(&tpl, &meta, TXN_TIMEOUT)?;
                producer.commit_transaction(TXN_TIMEOUT)?;
                txn_open = false;
            } else {
                consumer.commit(&tpl, CommitMode::Sync)?;
            }
            offsets.clear();
        }
    }
    if txn_open {
        producer.abort_transaction(TXN_TIMEOUT)?;
    }
    Ok(())
}
