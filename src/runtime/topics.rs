//! Internal topics: checking source topics and creating changelog and
//! repartition topics at start-up.
//!
//! Rules (as Kafka Streams):
//! * every user source topic must exist; Weir never creates user topics;
//! * the source topics of one sub-topology are *co-partitioned*: equal
//!   partition counts, so partition `p` of each lands in task `(sub, p)`;
//! * a repartition topic gets as many partitions as the user topics read
//!   by the same sub-topology (a join after a key change: co-partitioned
//!   with the other side), else as the largest user source topic; it is
//!   written and read by Weir only, and has `retention.ms=-1`: the purge
//!   deletes what was consumed, time never deletes what was not;
//! * a changelog topic `<application_id>-<store>-changelog` gets as many
//!   partitions as its store's sub-topology has tasks, with
//!   `cleanup.policy=compact`; the changelog of a window or session store
//!   gets `compact,delete` with `retention.ms` = the store's retention + 1 day
//!   (Kafka Streams' `windowstore.changelog.additional.retention.ms` default),
//!   so expired windows leave the changelog too;
//! * an internal topic that already exists is accepted when its partition
//!   count is right, and is an error otherwise;
//! * a late-records topic of a windowed aggregation (`late_records_to`) is
//!   the one user topic Weir creates when it is missing (as many partitions
//!   as the largest user source topic, `cleanup.policy=delete`), so late
//!   records are never lost to a missing topic; an existing one is used as
//!   it is.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::Consumer;
use rdkafka::types::RDKafkaErrorCode;

use super::StreamsError;
use super::clients::MetadataClient;
use crate::topology::Topology;

/// Where each topic of the application goes, resolved at start-up.
#[derive(Clone, Debug, Default)]
pub struct TopicLayout {
    /// Number of tasks (partitions) of each sub-topology.
    pub tasks_per_subtopology: Vec<i32>,
    /// Which sub-topology reads each source topic (user and repartition).
    pub subtopology_of_topic: HashMap<String, u32>,
    /// Partition count of every topic the application reads or writes internally.
    pub partitions: BTreeMap<String, i32>,
    /// Internal repartition topics (full names).
    pub repartition_topics: Vec<String>,
    /// `(store, changelog topic)` of every logged store.
    pub changelog_topics: Vec<(String, String)>,
    /// `retention.ms` of the changelog topics of window and session stores.
    pub changelog_retention_ms: HashMap<String, i64>,
    /// Late-records topics of windowed aggregations (their partition
    /// counts are in `partitions`).
    pub late_topics: Vec<String>,
}

/// Added to a window or session store's retention for its changelog topic.
const CHANGELOG_ADDITIONAL_RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

impl TopicLayout {
    /// All topics the stream threads subscribe to.
    pub fn source_topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self.subtopology_of_topic.keys().cloned().collect();
        topics.sort();
        topics
    }
}

/// Reads the partition count of every topic in the cluster.
pub(crate) fn partition_counts(
    metadata_client: &MetadataClient,
    timeout: Duration,
) -> Result<HashMap<String, i32>, StreamsError> {
    let metadata = metadata_client.fetch_metadata(None, timeout).map_err(|e| {
        StreamsError::kafka("reading cluster metadata (is the broker reachable?)", e)
    })?;
    Ok(counts(&metadata))
}

fn counts(metadata: &rdkafka::metadata::Metadata) -> HashMap<String, i32> {
    metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect()
}

/// [`partition_counts`] at start-up: a broker that cannot be reached
/// (yet: it may be restarting) is asked again until `timeout` has passed,
/// with a warning per try; then the error says how long start-up waited.
pub(crate) fn wait_for_cluster(
    metadata_client: &MetadataClient,
    timeout: Duration,
) -> Result<HashMap<String, i32>, StreamsError> {
    let started = Instant::now();
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        // Short attempts: a refusal (wrong password, untrusted
        // certificate) is reported while a request waits, and ends start-up.
        let attempt = left.clamp(Duration::from_millis(500), Duration::from_secs(2));
        let error = match metadata_client.fetch_metadata(None, attempt) {
            Ok(metadata) => return Ok(counts(&metadata)),
            Err(error) => error,
        };
        // Error events wait in the client's queue until it is polled.
        for _ in 0..100 {
            match metadata_client.poll(Duration::ZERO) {
                Some(Err(e)) => {
                    if let Some(code) = e.rdkafka_error_code() {
                        metadata_client.context().note(code, &e.to_string());
                    }
                }
                Some(Ok(_)) => {}
                None => break,
            }
        }
        if let Some(why) = metadata_client.context().refused() {
            return Err(StreamsError::kafka(
                format!("connecting to the broker: {why}"),
                error,
            ));
        }
        if started.elapsed() >= timeout {
            return Err(StreamsError::kafka(
                format!(
                    "reading cluster metadata (is the broker reachable? start-up retried for {} s, \
                     see startup_timeout_ms)",
                    started.elapsed().as_secs()
                ),
                error,
            ));
        }
        tracing::warn!(
            %error,
            waited_s = started.elapsed().as_secs(),
            timeout_s = timeout.as_secs(),
            "the broker does not answer yet; retrying (startup_timeout_ms)"
        );
        std::thread::sleep(
            Duration::from_millis(500).min(timeout.saturating_sub(started.elapsed())),
        );
    }
}

/// Checks source topics and computes the layout of `topology` (no topic is created).
pub fn plan(
    topology: &Topology,
    application_id: &str,
    existing: &HashMap<String, i32>,
) -> Result<TopicLayout, StreamsError> {
    let repartition_topics = topology.repartition_topics(application_id);
    let mut layout = TopicLayout {
        repartition_topics: repartition_topics.clone(),
        changelog_topics: topology.changelog_topics(application_id),
        changelog_retention_ms: topology
            .changelog_retention_ms(application_id)
            .into_iter()
            .map(|(topic, r)| (topic, r.saturating_add(CHANGELOG_ADDITIONAL_RETENTION_MS)))
            .collect(),
        ..TopicLayout::default()
    };
    let user_counts = plan_user_topics(&mut layout, topology, application_id, existing)?;
    let max_user = user_counts.iter().flatten().copied().max().unwrap_or(0);
    // A repartition topic read together with user topics (a join after a
    // key change) is co-partitioned with them; any other gets the largest
    // user topic's count.
    let repartition_partitions = max_user.max(1);
    for topic in &repartition_topics {
        let partitions = layout
            .subtopology_of_topic
            .get(topic)
            .and_then(|&sub| user_counts[sub as usize])
            .unwrap_or(repartition_partitions);
        layout.partitions.insert(topic.clone(), partitions);
    }
    for (sub, user) in user_counts.iter().enumerate() {
        let sources = topology.source_topics(sub as u32, application_id);
        let tasks = match user {
            Some(n) => {
                let internal = |t: &String| repartition_topics.contains(t);
                if sources
                    .iter()
                    .any(|t| internal(t) && layout.partitions[t] != *n)
                {
                    return Err(StreamsError::NotCopartitioned {
                        topics: sources.clone(),
                        counts: sources.iter().map(|t| layout.partitions[t]).collect(),
                    });
                }
                *n
            }
            None => repartition_partitions,
        };
        layout.tasks_per_subtopology.push(tasks);
    }
    for topic in topology.late_topics() {
        let partitions = existing
            .get(topic)
            .copied()
            .unwrap_or(repartition_partitions);
        layout.partitions.insert(topic.clone(), partitions);
        layout.late_topics.push(topic.clone());
    }
    for (store, changelog) in &layout.changelog_topics {
        let sub = topology.subtopology_of_store(store).unwrap_or(0) as usize;
        let tasks = layout.tasks_per_subtopology.get(sub).copied().unwrap_or(1);
        layout.partitions.insert(changelog.clone(), tasks);
    }
    check_internal_topics(&layout, existing)?;
    Ok(layout)
}

/// Records the user source topics of every sub-topology in `layout`, with
/// their partition counts, and returns each sub-topology's count (`None`
/// for one that reads only repartition topics). Fails on a missing topic or
/// on co-partitioned topics with different counts.
fn plan_user_topics(
    layout: &mut TopicLayout,
    topology: &Topology,
    application_id: &str,
    existing: &HashMap<String, i32>,
) -> Result<Vec<Option<i32>>, StreamsError> {
    let mut user_counts = Vec::new();
    for sub in 0..topology.subtopology_count() {
        let sources = topology.source_topics(sub, application_id);
        let user: Vec<&String> = sources
            .iter()
            .filter(|t| !layout.repartition_topics.contains(t))
            .collect();
        let mut counts = Vec::new();
        for topic in &user {
            match existing.get(topic.as_str()) {
                Some(n) => counts.push(*n),
                None => {
                    return Err(StreamsError::MissingSourceTopic {
                        topic: topic.to_string(),
                    });
                }
            }
        }
        if counts.windows(2).any(|w| w[0] != w[1]) {
            return Err(StreamsError::NotCopartitioned {
                topics: user.iter().map(|t| t.to_string()).collect(),
                counts,
            });
        }
        if let Some(&n) = counts.first() {
            for topic in &user {
                layout.partitions.insert(topic.to_string(), n);
            }
        }
        user_counts.push(counts.first().copied());
        for topic in sources {
            layout.subtopology_of_topic.insert(topic, sub);
        }
    }
    Ok(user_counts)
}

/// Fails when an internal topic exists with another partition count than
/// `layout` needs.
fn check_internal_topics(
    layout: &TopicLayout,
    existing: &HashMap<String, i32>,
) -> Result<(), StreamsError> {
    for topic in layout
        .repartition_topics
        .iter()
        .chain(layout.changelog_topics.iter().map(|(_, t)| t))
    {
        let expected = layout.partitions[topic];
        if let Some(&actual) = existing.get(topic)
            && actual != expected
        {
            return Err(StreamsError::InternalTopicMismatch {
                topic: topic.clone(),
                expected,
                actual,
            });
        }
    }
    Ok(())
}

/// Creates the internal topics and late-records topics of `layout` that do
/// not exist yet and waits until the broker lists them.
pub(crate) async fn create_internal_topics(
    admin: &AdminClient<DefaultClientContext>,
    metadata_client: &MetadataClient,
    layout: &TopicLayout,
    existing: &HashMap<String, i32>,
    replication_factor: Option<i16>,
) -> Result<(), StreamsError> {
    // (topic, partitions, topic configs)
    type Wanted = (String, i32, Vec<(&'static str, String)>);
    let mut wanted: Vec<Wanted> = Vec::new();
    for topic in &layout.repartition_topics {
        wanted.push((
            topic.clone(),
            layout.partitions[topic],
            vec![
                ("cleanup.policy", "delete".into()),
                ("segment.bytes", "52428800".into()),
                // As Kafka Streams: consumed records are deleted by the
                // purge (DeleteRecords up to the committed offsets), never
                // by time: records carry their input's timestamps, and
                // retention would delete unconsumed re-keyed records of
                // input older than `retention.ms` (a replay of history).
                ("retention.ms", "-1".into()),
            ],
        ));
    }
    for (_, topic) in &layout.changelog_topics {
        let configs = match layout.changelog_retention_ms.get(topic) {
            Some(ms) => vec![
                ("cleanup.policy", "compact,delete".into()),
                ("retention.ms", ms.to_string()),
            ],
            None => vec![("cleanup.policy", "compact".into())],
        };
        wanted.push((topic.clone(), layout.partitions[topic], configs));
    }
    for topic in &layout.late_topics {
        wanted.push((
            topic.clone(),
            layout.partitions[topic],
            vec![("cleanup.policy", "delete".into())],
        ));
    }
    wanted.retain(|(name, _, _)| !existing.contains_key(name));
    if wanted.is_empty() {
        return Ok(());
    }
    let new_topics: Vec<NewTopic<'_>> = wanted
        .iter()
        .map(|(name, partitions, configs)| {
            configs.iter().fold(
                NewTopic::new(
                    name,
                    *partitions,
                    TopicReplication::Fixed(replication_factor.map_or(-1, i32::from)),
                ),
                |t, (k, v)| t.set(k, v),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .create_topics(&new_topics, &options)
        .await
        .map_err(|e| StreamsError::kafka("creating internal and late-records topics", e))?;
    for result in results {
        match result {
            Ok(topic) => tracing::info!(topic, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                let hint = if code == RDKafkaErrorCode::InvalidReplicationFactor {
                    "; replication_factor must not exceed the number of brokers"
                } else {
                    ""
                };
                return Err(StreamsError::kafka(
                    format!("creating topic '{topic}' (internal or late records){hint}"),
                    rdkafka::error::KafkaError::AdminOp(code),
                ));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // A metadata request may go to a broker that just died: ask again.
        match partition_counts(metadata_client, Duration::from_secs(5)) {
            Ok(counts)
                if wanted
                    .iter()
                    .all(|(name, n, _)| counts.get(name) == Some(n)) =>
            {
                return Ok(());
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "waiting for new internal topics; retrying"),
        }
        if Instant::now() > deadline {
            return Err(StreamsError::kafka(
                "waiting for new internal topics to appear in metadata",
                rdkafka::error::KafkaError::AdminOp(RDKafkaErrorCode::RequestTimedOut),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
