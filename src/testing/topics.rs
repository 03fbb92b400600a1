//! Creating and deleting topics on the test broker.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

use super::TestBroker;

/// How long topic creation may take before it is a failure.
const TOPIC_TIMEOUT: Duration = Duration::from_secs(30);

impl TestBroker {
    /// Creates topics as (name, partitions) with the broker's default
    /// replication factor (`default.replication.factor`: 1 on a single
    /// broker, 3 on `scripts/kafka cluster`) and waits until every one
    /// shows all its partitions in the metadata. A topic that already
    /// exists is fine.
    ///
    /// # Panics
    ///
    /// When the request fails or a topic is not visible within 30 s.
    pub fn create_topics(&self, topics: &[(&str, i32)]) {
        let new: Vec<NewTopic<'_>> = topics
            .iter()
            .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(-1)))
            .collect();
        let admin = self.admin();
        let options = AdminOptions::new().operation_timeout(Some(TOPIC_TIMEOUT));
        let results = block_on(|| admin.create_topics(&new, &options))
            .unwrap_or_else(|e| panic!("creating topics {topics:?} failed: {e}"));
        for result in results {
            if let Err((topic, code)) = result {
                assert_eq!(
                    code,
                    RDKafkaErrorCode::TopicAlreadyExists,
                    "creating topic {topic} failed: {code}"
                );
            }
        }
        let metadata: BaseConsumer = self
            .client_config()
            .create()
            .expect("creating the metadata client failed");
        for (name, partitions) in topics {
            self.await_partitions(&metadata, name, *partitions);
        }
    }

    /// Deletes topics; missing ones are ignored.
    ///
    /// # Panics
    ///
    /// When the request fails for another reason.
    pub fn delete_topics(&self, topics: &[&str]) {
        let admin = self.admin();
        let options = AdminOptions::new().operation_timeout(Some(TOPIC_TIMEOUT));
        let results = block_on(|| admin.delete_topics(topics, &options))
            .unwrap_or_else(|e| panic!("deleting topics {topics:?} failed: {e}"));
        for result in results {
            if let Err((topic, code)) = result {
                assert_eq!(
                    code,
                    RDKafkaErrorCode::UnknownTopicOrPartition,
                    "deleting topic {topic} failed: {code}"
                );
            }
        }
    }

    /// The configuration of `topic` as the broker reports it (every entry,
    /// defaults included).
    ///
    /// # Panics
    ///
    /// When the request fails.
    pub fn topic_config(&self, topic: &str) -> BTreeMap<String, String> {
        let admin = self.admin();
        let options = AdminOptions::new().request_timeout(Some(TOPIC_TIMEOUT));
        let resources = [ResourceSpecifier::Topic(topic)];
        let results = block_on(|| admin.describe_configs(&resources, &options))
            .unwrap_or_else(|e| panic!("describing topic {topic} failed: {e}"));
        let resource = results
            .into_iter()
            .next()
            .expect("one result per resource")
            .unwrap_or_else(|e| panic!("describing topic {topic} failed: {e}"));
        resource
            .entries
            .into_iter()
            .filter_map(|e| Some((e.name, e.value?)))
            .collect()
    }

    /// The leader (broker node id) of `topic`'s `partition` and how many
    /// replicas it has, once it has a leader (after a broker failure a new
    /// one is elected within the broker session timeout).
    ///
    /// # Panics
    ///
    /// When the partition has no leader within 60 s.
    pub fn partition_leader(&self, topic: &str, partition: i32) -> (i32, usize) {
        let client: BaseConsumer = self
            .client_config()
            .create()
            .expect("creating the metadata client failed");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(md) = client.fetch_metadata(Some(topic), Duration::from_secs(5))
                && let Some(p) = md
                    .topics()
                    .iter()
                    .find(|t| t.name() == topic)
                    .and_then(|t| t.partitions().iter().find(|p| p.id() == partition))
                && p.leader() >= 0
            {
                return (p.leader(), p.replicas().len());
            }
            assert!(
                Instant::now() < deadline,
                "{topic}/{partition} has no leader after 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether the controller has fenced broker `node`: the cluster's
    /// metadata lists it no more and no partition is led by it. A killed
    /// broker restarted before that replays metadata in which it still
    /// leads, and Kafka 4.4 lets it act on records its log holds beyond
    /// the high watermark (ARCHITECTURE.md, *A broker back before it was
    /// fenced*); fault tests restart a killed broker only once this holds.
    pub fn fenced(&self, node: i32) -> bool {
        let client: BaseConsumer = self
            .client_config()
            .create()
            .expect("creating the metadata client failed");
        client
            .fetch_metadata(None, Duration::from_secs(5))
            .is_ok_and(|md| {
                !md.brokers().iter().any(|b| b.id() == node)
                    && !md
                        .topics()
                        .iter()
                        .flat_map(|t| t.partitions())
                        .any(|p| p.leader() == node)
            })
    }

    /// The broker leading the `__transaction_state` partition of
    /// `transactional_id`: its transaction coordinator.
    pub fn transaction_coordinator(&self, transactional_id: &str) -> i32 {
        self.coordinator("__transaction_state", transactional_id)
    }

    /// The broker leading the `__consumer_offsets` partition of consumer
    /// group `group`: its group coordinator, which a transactional
    /// producer sends the group's offsets to.
    pub fn group_coordinator(&self, group: &str) -> i32 {
        self.coordinator("__consumer_offsets", group)
    }

    /// The leader of `topic`'s partition for `key`, placed as the broker
    /// places coordinators (see [`transaction_state_partition`]).
    fn coordinator(&self, topic: &str, key: &str) -> i32 {
        let client: BaseConsumer = self
            .client_config()
            .create()
            .expect("creating the metadata client failed");
        let partitions = client
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .ok()
            .and_then(|md| md.topics().first().map(|t| t.partitions().len()))
            .filter(|&n| n > 0)
            .unwrap_or_else(|| {
                panic!("the broker lists no {topic} partitions (has one been used yet?)")
            });
        let partition = transaction_state_partition(key, partitions as i32);
        self.partition_leader(topic, partition).0
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        self.client_config()
            .create()
            .expect("creating the admin client failed")
    }

    /// Waits until `topic` shows `partitions` partitions: creation returns
    /// before every broker's metadata has the topic.
    fn await_partitions(&self, metadata: &BaseConsumer, topic: &str, partitions: i32) {
        let deadline = Instant::now() + TOPIC_TIMEOUT;
        loop {
            let ready = metadata
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    m.topics()
                        .first()
                        .map(|t| t.error().is_none() && t.partitions().len() == partitions as usize)
                })
                .unwrap_or(false);
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {topic} did not appear with {partitions} partitions within {TOPIC_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The members of consumer group `group` on the broker at
/// `bootstrap_servers` and the partitions each owns now, under either
/// group protocol (KIP-848's `consumer` groups are described with
/// `ConsumerGroupDescribe`, classic ones with `DescribeGroups`): to wait
/// until an application's group has settled, for example. An unknown or
/// empty group has no members.
///
/// # Errors
///
/// When the client cannot be created or the broker does not answer
/// within `timeout`, with the reason.
pub fn group_members(
    bootstrap_servers: &str,
    group: &str,
    timeout: Duration,
) -> Result<Vec<super::GroupMember>, String> {
    let client: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap_servers)
        .create()
        .map_err(|e| format!("creating the admin client: {e}"))?;
    crate::runtime::group_describe::describe_group(client.inner(), group, timeout)
}

/// The `__transaction_state` partition of `transactional_id` among
/// `partitions`, as the broker computes it (Java's `String.hashCode`, then
/// `Utils.abs(hash) % partitions`).
///
/// ```
/// assert_eq!(weir::testing::transaction_state_partition("abc", 10), 96354 % 10);
/// ```
pub fn transaction_state_partition(transactional_id: &str, partitions: i32) -> i32 {
    let hash = transactional_id
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    (if hash == i32::MIN { 0 } else { hash.abs() }) % partitions
}

/// Runs the future `make` returns to completion on a runtime of its own, on
/// a thread of its own: the helpers block, and may be called from inside a
/// caller's tokio runtime, where a nested runtime would panic.
fn block_on<F: Future>(make: impl FnOnce() -> F + Send) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("creating a runtime for an admin request failed")
                    .block_on(make())
            })
            .join()
            .expect("the admin request thread panicked")
    })
}
