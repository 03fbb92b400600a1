//! Operator tools of the `weir` binary: creating topics, writing sample
//! input, reading a topic as a table. Blocking. They belong to the binary,
//! not to the library: a library user's equivalents for tests are in
//! `weir::testing`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

use rdkafka::consumer::BaseConsumer;
use weir::config::Connection;
use weir::runtime::EndOfPartitionContext;

/// Errors of the tools.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A Kafka request failed.
    #[error("{context}: {source}")]
    Kafka {
        /// What was being done.
        context: String,
        /// The client error.
        #[source]
        source: KafkaError,
    },
    /// A topic does not exist.
    #[error("topic '{0}' does not exist")]
    MissingTopic(String),
    /// Records the broker never acknowledged.
    #[error("{failed} records were not delivered; the first failure: {first}")]
    NotDelivered {
        /// How many.
        failed: u64,
        /// The first delivery error.
        first: KafkaError,
    },
}

/// How long `generate` waits for the last records to be acknowledged:
/// librdkafka's `message.timeout.ms` default, after which every record is
/// either delivered or reported failed.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(300);

/// Counts the records the broker did not acknowledge (their delivery
/// reports), so `generate` fails instead of losing them silently.
#[derive(Default)]
struct DeliveryCheck {
    failed: std::sync::atomic::AtomicU64,
    first: std::sync::Mutex<Option<KafkaError>>,
}

impl rdkafka::ClientContext for DeliveryCheck {}

impl rdkafka::producer::ProducerContext for DeliveryCheck {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.clone());
        }
    }
}

fn kafka(context: impl Into<String>) -> impl FnOnce(KafkaError) -> ToolError {
    let context = context.into();
    move |source| ToolError::Kafka { context, source }
}

/// Creates the topics that do not exist yet with `partitions` partitions.
pub fn ensure_topics(
    connection: &Connection,
    topics: &[&str],
    partitions: i32,
) -> Result<(), ToolError> {
    let bootstrap = &connection.bootstrap_servers;
    let admin: AdminClient<DefaultClientContext> = connection
        .client_config()
        .create()
        .map_err(kafka("creating the admin client"))?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(-1)))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let results = runtime
        .block_on(admin.create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .map_err(kafka(format!(
            "creating topics {topics:?} (is the broker at {bootstrap} reachable?)"
        )))?;
    for result in results {
        if let Err((topic, code)) = result
            && code != RDKafkaErrorCode::TopicAlreadyExists
        {
            return Err(ToolError::Kafka {
                context: format!("creating topic {topic}"),
                source: KafkaError::AdminOp(code),
            });
        }
    }
    Ok(())
}

/// Sample records to write: `start..start+count` made by `sample`, at
/// `rate` records per second (0: as fast as possible).
#[derive(Clone, Copy)]
pub struct Samples<'a> {
    /// Makes record `i`.
    pub sample: &'a dyn Fn(u64) -> (Option<Vec<u8>>, Vec<u8>),
    /// The topic (an index into the topics given) of record `i`; all to
    /// the first when `None`.
    pub input_of: Option<fn(u64) -> usize>,
    /// The first record.
    pub start: u64,
    /// Records to write.
    pub count: u64,
    /// Records per second; 0: as fast as possible.
    pub rate: u64,
}

/// Writes `samples` to `topics`. Returns the count written.
pub fn generate(
    connection: &Connection,
    topics: &[String],
    samples: &Samples<'_>,
) -> Result<u64, ToolError> {
    let Samples {
        sample,
        input_of,
        start,
        count,
        rate,
    } = *samples;
    let producer: ThreadedProducer<DeliveryCheck> = connection
        .client_config()
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create_with_context(DeliveryCheck::default())
        .map_err(kafka("creating the producer"))?;
    let began = Instant::now();
    for i in start..start + count {
        if rate > 0 {
            let due = began + Duration::from_secs_f64((i - start) as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let (key, value) = sample(i);
        let topic = &topics[input_of.map_or(0, |f| f(i))];
        let mut record = BaseRecord::<[u8], [u8]>::to(topic).payload(&value);
        if let Some(k) = key.as_deref() {
            record = record.key(k);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(kafka(format!("producing to {topic}"))(e)),
            }
        }
    }
    producer
        .flush(DELIVERY_TIMEOUT)
        .map_err(kafka("flushing the producer"))?;
    let check = producer.context();
    let failed = check.failed.load(std::sync::atomic::Ordering::Relaxed);
    let first = check.first.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(first) = first {
        return Err(ToolError::NotDelivered { failed, first });
    }
    Ok(count)
}

/// Reads `topic` from the beginning to its end with `read_committed` and
/// returns the last value of every key, in key order.
pub fn latest_per_key(
    connection: &Connection,
    topic: &str,
) -> Result<BTreeMap<Vec<u8>, Option<Vec<u8>>>, ToolError> {
    let consumer: BaseConsumer<EndOfPartitionContext> = connection
        .client_config()
        .set("group.id", "weir-table-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create_with_context(EndOfPartitionContext)
        .map_err(kafka("creating the reader"))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(kafka(format!("reading metadata of {topic}")))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .first()
        .filter(|t| t.error().is_none())
        .map(|t| t.partitions().iter().map(|p| p.id()).collect())
        .unwrap_or_default();
    if partitions.is_empty() {
        return Err(ToolError::MissingTopic(topic.to_string()));
    }
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(kafka("building the assignment"))?;
    }
    consumer
        .assign(&tpl)
        .map_err(kafka("assigning partitions"))?;
    let mut done = std::collections::HashSet::new();
    let mut table = BTreeMap::new();
    while done.len() < partitions.len() {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                done.remove(&m.partition());
                table.insert(
                    m.key().unwrap_or_default().to_vec(),
                    m.payload().map(<[u8]>::to_vec),
                );
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                done.insert(p);
            }
            Some(Err(e)) => return Err(kafka(format!("reading {topic}"))(e)),
            None => {}
        }
    }
    Ok(table)
}
