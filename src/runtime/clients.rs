//! librdkafka client configurations of the runtime.
//!
//! Settings Weir relies on are set here; user options from
//! [`StreamsConfig`]'s `kafka.`/`consumer.`/`producer.`/`admin.` maps are
//! applied on top (the keys Weir must own are rejected at validation).

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};

use super::StreamsError;
use super::collector::{ProducerEvents, ProducerEventsContext, ThreadProducer};
use crate::config::{GroupProtocol, StreamsConfig};

fn base(
    config: &StreamsConfig,
    overrides: &std::collections::BTreeMap<String, String>,
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.bootstrap_servers);
    for (k, v) in config.client_overrides.iter().chain(overrides) {
        c.set(k, v);
    }
    c
}

/// The session timeout of classic-protocol consumers: a crashed instance's
/// partitions move after 10 s (librdkafka's default is 45 s), or sooner
/// when `max.poll.interval.ms` is set lower (librdkafka refuses a session
/// timeout above it). A `session.timeout.ms` given in the configuration is
/// applied over it.
fn session_timeout_ms(config: &StreamsConfig) -> u64 {
    consumer_setting(config, "max.poll.interval.ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(10_000, |max_poll| max_poll.clamp(1, 10_000))
}

/// The consumer setting `key` as given in the configuration: the
/// `consumer.` key, else the `kafka.` one (applied in that order, so the
/// consumer's wins).
fn consumer_setting<'c>(config: &'c StreamsConfig, key: &str) -> Option<&'c String> {
    config
        .consumer_overrides
        .get(key)
        .or_else(|| config.client_overrides.get(key))
}

/// The error for a session timeout the broker refused (classic protocol):
/// what was asked (the one given, else [`session_timeout_ms`]'s), where it
/// came from and what to set.
pub(crate) fn refused_session_timeout(config: &StreamsConfig) -> crate::config::ConfigError {
    let given = consumer_setting(config, "session.timeout.ms");
    let ms = given.map_or_else(|| session_timeout_ms(config).to_string(), String::clone);
    let origin = if given.is_some() {
        "consumer.session.timeout.ms"
    } else if consumer_setting(config, "max.poll.interval.ms").is_some() {
        "derived from max.poll.interval.ms, which is lower than Weir's 10000 ms default"
    } else {
        "Weir's default"
    };
    crate::config::ConfigError::new(
        "consumer.session.timeout.ms",
        format!(
            "the broker refused the consumer group session timeout of {ms} ms ({origin}); \
             it accepts group.min.session.timeout.ms to group.max.session.timeout.ms \
             (6000 to 1800000 by default): set consumer.session.timeout.ms (and \
             consumer.max.poll.interval.ms, which must not be lower) within them"
        ),
    )
}

/// The `client.id` of stream thread `index`'s group consumer:
/// `<application_id>-<process id>-<index>-consumer`, then
/// `@<advertised endpoint>` when there is one. Other instances read both
/// from the group description (standby placement, query routing); see
/// [`super::group_describe::parse_client_id`].
pub(crate) fn consumer_client_id(config: &StreamsConfig, process_id: &str, index: usize) -> String {
    let mut id = format!("{}-{process_id}-{index}-consumer", config.application_id);
    if let Some(endpoint) = &config.advertised_endpoint {
        id.push('@');
        id.push_str(endpoint);
    }
    id
}

/// `max.poll.interval.ms` of KIP-848 consumers, which is also the
/// rebalance timeout the broker gives a member to revoke partitions before
/// it fences the member. librdkafka retries a `ConsumerGroupHeartbeat`
/// that timed out on the client (a coordinator slowed by a paused or dying
/// broker) with the same partial request; when the broker had processed
/// the first one, it does not send the member's new assignment again (it
/// does for a full request, which the Java client sends after any error),
/// so the member never revokes the partitions another member waits for,
/// and those partitions are processed by no one until the broker fences
/// the member at the rebalance timeout (librdkafka's default: 5 minutes;
/// seen in the chaos runs). 60 s bounds that; a thread polls far more
/// often (restores run in slices between polls).
const KIP848_REBALANCE_TIMEOUT_MS: &str = "60000";

/// The group consumer of stream thread `index`.
pub(crate) fn consumer<C: ConsumerContext>(
    config: &StreamsConfig,
    index: usize,
    process_id: &str,
    context: C,
) -> Result<BaseConsumer<C>, StreamsError> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.bootstrap_servers)
        .set("group.id", &config.application_id)
        .set("client.id", consumer_client_id(config, process_id, index))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        // Consumer lag per partition (crate::metrics::LagMeter).
        .set("statistics.interval.ms", "5000")
        // Prefetch less than librdkafka's defaults (100 000 records per
        // partition, up to 64 MiB per consumer): the stream thread buffers
        // `buffered_records_per_partition` itself, and 16 MiB is still
        // several commit intervals of input at full speed. The short
        // backoff refetches soon after the queue drains below the bound
        // (librdkafka's default waits 1 s).
        .set("queued.min.messages", "10000")
        .set("queued.max.messages.kbytes", "16384")
        .set("fetch.queue.backoff.ms", "20")
        .set(
            "isolation.level",
            if config.is_exactly_once() {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        );
    // `range` gives partition p of every subscribed topic with equal
    // partition counts to one member: co-partitioned topics land together
    // (librdkafka takes no custom assignor, so Kafka Streams' cannot be used).
    match config.group_protocol {
        GroupProtocol::Consumer => {
            // KIP-848: the broker runs the assignor and owns the session
            // and heartbeat timing (ARCHITECTURE.md, "Group protocols").
            c.set("group.protocol", "consumer")
                .set("group.remote.assignor", "range")
                .set("max.poll.interval.ms", KIP848_REBALANCE_TIMEOUT_MS);
        }
        GroupProtocol::Classic | GroupProtocol::Auto => {
            let session_ms = session_timeout_ms(config);
            c.set("partition.assignment.strategy", "range")
                .set("session.timeout.ms", session_ms.to_string())
                .set("heartbeat.interval.ms", (session_ms / 5).max(1).to_string());
        }
    }
    if let Some(instance) = &config.instance_id {
        // Static membership: one stable member per stream thread.
        c.set("group.instance.id", format!("{instance}-{index}"));
    }
    for (k, v) in config
        .client_overrides
        .iter()
        .chain(&config.consumer_overrides)
    {
        c.set(k, v);
    }
    c.create_with_context(context).map_err(|e| {
        StreamsError::kafka(
            "creating the consumer (check the consumer./kafka. options)",
            e,
        )
    })
}

/// The consumer that restores stores from changelogs (no group); it reads
/// to the end of partitions, so use [`RestoreConsumer`], whose context does
/// not log the end of a partition as an error (the stream thread still
/// names plain `BaseConsumer` here).
///
/// [`RestoreConsumer`]: super::end_of_partition::RestoreConsumer
pub(crate) fn restore_consumer<C: ConsumerContext + Default + 'static>(
    config: &StreamsConfig,
) -> Result<BaseConsumer<C>, StreamsError> {
    restore_config(config)
        .create_with_context(C::default())
        .map_err(|e| StreamsError::kafka("creating the restore consumer", e))
}

/// How long the broker may hold a fetch of the active tasks' restore
/// consumer that finds no records. Under exactly-once a changelog ends with a
/// transaction marker, so a store that is already current still reads
/// (nothing) up to the high watermark, and the end of the partition is only
/// reported by a fetch that comes back empty: with the default 500 ms each
/// current store of a moved task cost about a second. That consumer is
/// assigned only while it restores, so short fetches do not spin while idle.
const ACTIVE_RESTORE_FETCH_WAIT_MS: &str = "10";

/// The restore consumer of a stream thread's active tasks: as
/// [`restore_consumer`], with short fetch waits so that reaching the end of a
/// partition is seen at once ([`ACTIVE_RESTORE_FETCH_WAIT_MS`]). A
/// `fetch.wait.max.ms` set in the configuration still wins.
pub(crate) fn active_restore_consumer<C: ConsumerContext + Default + 'static>(
    config: &StreamsConfig,
) -> Result<BaseConsumer<C>, StreamsError> {
    let mut c = restore_config(config);
    if consumer_setting(config, "fetch.wait.max.ms").is_none() {
        c.set("fetch.wait.max.ms", ACTIVE_RESTORE_FETCH_WAIT_MS);
    }
    c.create_with_context(C::default())
        .map_err(|e| StreamsError::kafka("creating the restore consumer", e))
}

/// The base of the consumers outside the group (restore, metadata):
/// they never join it, but librdkafka checks the session timeout against
/// `max.poll.interval.ms` all the same.
fn plain_consumer_config(config: &StreamsConfig) -> ClientConfig {
    let mut c = base(config, &config.consumer_overrides);
    if c.get("session.timeout.ms").is_none() {
        c.set("session.timeout.ms", session_timeout_ms(config).to_string());
    }
    c
}

fn restore_config(config: &StreamsConfig) -> ClientConfig {
    let mut c = plain_consumer_config(config);
    c.set("group.id", format!("{}-restore", config.application_id))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        // Once the records fetched ahead reach librdkafka's bounds
        // (`queued.min.messages`), its default postpones the next fetch by
        // a second: a restore that drains the queue in a tenth of that
        // would sit idle (1,000,000 records took 6.4 s instead of about 1).
        .set("fetch.queue.backoff.ms", "20");
    c
}

/// Kafka Streams' EOS default for `transaction.timeout.ms`: a crashed
/// instance's open transaction blocks read_committed readers for at most
/// this long.
const TRANSACTION_TIMEOUT_MS: u64 = 10_000;

/// The stream threads' transaction timeout: `transaction.timeout.ms` from
/// the `producer.` or `kafka.` options, else [`TRANSACTION_TIMEOUT_MS`].
pub(crate) fn transaction_timeout(config: &StreamsConfig) -> Duration {
    let ms = config
        .producer_overrides
        .get("transaction.timeout.ms")
        .or_else(|| config.client_overrides.get("transaction.timeout.ms"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(TRANSACTION_TIMEOUT_MS);
    Duration::from_millis(ms)
}

/// The producer of a stream thread; transactional when `transactional_id` is given.
pub(crate) fn producer(
    config: &StreamsConfig,
    transactional_id: Option<&str>,
    events: Arc<ProducerEvents>,
) -> Result<ThreadProducer, StreamsError> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.bootstrap_servers)
        // Keys land where Java producers and Kafka Streams put them.
        .set("partitioner", "murmur2_random")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    if let Some(id) = transactional_id {
        c.set("transactional.id", id)
            .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string())
            // librdkafka (#5511, 2.12) waits for the group coordinator it
            // sends the offsets of a transaction to by waiting for some
            // broker connection to go up or down; a coordinator that died
            // long enough to leave the cluster's metadata never does, and
            // with sparse connections nothing else may either, so
            // `send_offsets_to_transaction` hung until the partition
            // leaders moved back (5 minutes by default). Connected to
            // every broker and refreshing the broker list every 10 s, the
            // producer sees the coordinator's broker come back within
            // seconds, connects, and the wait asks for the coordinator
            // again. (`tests/cluster_failover.rs` kills the group
            // coordinator for longer than the session timeout.)
            .set("enable.sparse.connections", "false")
            .set("topic.metadata.refresh.interval.ms", "10000");
    }
    for (k, v) in config
        .client_overrides
        .iter()
        .chain(&config.producer_overrides)
    {
        c.set(k, v);
    }
    let context = ProducerEventsContext {
        events,
        transactional_id: transactional_id.map(str::to_string),
    };
    c.create_with_context(context).map_err(|e| {
        StreamsError::kafka(
            "creating the producer (check the producer./kafka. options)",
            e,
        )
    })
}

/// The admin client.
pub(crate) fn admin(
    config: &StreamsConfig,
) -> Result<AdminClient<DefaultClientContext>, StreamsError> {
    base(config, &config.admin_overrides).create().map_err(|e| {
        StreamsError::kafka(
            "creating the admin client (check the admin./kafka. options)",
            e,
        )
    })
}

/// The client of start-up's metadata requests; its context keeps a
/// refusal (authentication, TLS) for [`super::topics::wait_for_cluster`].
pub(crate) type MetadataClient = BaseConsumer<super::client_log::StartupContext>;

/// A plain client for metadata requests.
pub(crate) fn metadata_client(config: &StreamsConfig) -> Result<MetadataClient, StreamsError> {
    plain_consumer_config(config)
        // Error lines (a failed TLS handshake says why) reach the context.
        .set_log_level(rdkafka::config::RDKafkaLogLevel::Error)
        .create_with_context(super::client_log::StartupContext::default())
        .map_err(|e| StreamsError::kafka("creating the metadata client", e))
}
