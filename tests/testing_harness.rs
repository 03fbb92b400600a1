//! `weir::testing`, the harness Weir ships for users' integration tests, on
//! the real broker: topic creation, producing, and a `read_committed` read
//! that sees committed transactions and never an aborted one; and a user's
//! topology test written as the module docs show it; and describing an
//! application's consumer group.

mod common;

use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir::config::ProcessingGuarantee;
use weir::runtime::KafkaStreams;
use weir::testing::{self, Isolation, unique_name};
use weir::topology::{Consumed, Produced, StreamsBuilder};

/// Writes one record in a transaction and commits it, then one in a
/// transaction that is aborted.
fn commit_one_abort_one(topic: &str, committed: &str, aborted: &str) {
    let producer: BaseProducer = testing::broker()
        .client_config()
        .set("transactional.id", unique_name("harness-txn"))
        .create()
        .expect("creating the transactional producer");
    let timeout = Duration::from_secs(30);
    producer
        .init_transactions(timeout)
        .expect("init_transactions");
    for (value, commit) in [(committed, true), (aborted, false)] {
        producer.begin_transaction().expect("begin_transaction");
        producer
            .send(BaseRecord::to(topic).key("k").payload(value))
            .map_err(|(e, _)| e)
            .expect("sending in the transaction");
        producer.flush(timeout).expect("flushing the transaction");
        if commit {
            producer.commit_transaction(timeout).expect("commit");
        } else {
            producer.abort_transaction(timeout).expect("abort");
        }
    }
}

#[test]
fn read_committed_sees_committed_records_and_never_aborted_ones() {
    let kafka = testing::broker();
    let topic = unique_name("harness-isolation");
    kafka.create_topics(&[(&topic, 1)]);

    let written = kafka.produce(&topic, [(Some("k"), "plain")]);
    assert_eq!(written, 1);
    commit_one_abort_one(&topic, "committed", "aborted");

    let values = |records: &[testing::ReadRecord]| -> Vec<String> {
        records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
            .collect()
    };
    let committed = kafka.read_committed(&topic);
    assert_eq!(values(&committed), ["plain", "committed"]);
    assert!(
        committed
            .iter()
            .all(|r| r.key.as_deref() == Some(&b"k"[..]))
    );
    // The aborted record is in the log: only the isolation level hides it.
    let everything = kafka.read_to_end(&topic, Isolation::ReadUncommitted);
    assert_eq!(values(&everything), ["plain", "committed", "aborted"]);
    assert_eq!(
        kafka.latest_per_key(&topic),
        [(b"k".to_vec(), Some(b"committed".to_vec()))].into()
    );
}

#[test]
fn create_topics_makes_the_partitions_and_tolerates_existing_topics() {
    let kafka = testing::broker();
    let topic = unique_name("harness-create");
    kafka.create_topics(&[(&topic, 3)]);
    kafka.create_topics(&[(&topic, 3)]);
    // Keys spread over the three partitions; all of them are read back.
    let keys: Vec<String> = (0..30).map(|i| format!("key-{i}")).collect();
    kafka.produce(&topic, keys.iter().map(|k| (Some(k), "v")));
    let records = kafka.read_committed(&topic);
    assert_eq!(records.len(), 30);
    let partitions: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert_eq!(partitions, [0, 1, 2].into());
    kafka.delete_topics(&[&topic]);
    kafka.delete_topics(&[&topic]);
}

/// The module docs' example, run: a user's topology test in a few lines.
#[test]
fn a_topology_test_as_the_docs_show_it() {
    let kafka = testing::broker();
    let (orders, large) = (unique_name("orders"), unique_name("large-orders"));
    kafka.create_topics(&[(&orders, 2), (&large, 2)]);

    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>(&orders, Consumed::new())
        .filter(|_, amount| *amount >= 100)
        .to(&large, Produced::new());
    let mut config = kafka.streams_config(&unique_name("large-orders-app"));
    config.processing_guarantee = ProcessingGuarantee::ExactlyOnceV2;
    let mut app = KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().unwrap();

    kafka.produce(
        &orders,
        [
            (Some("a"), 5i64.to_be_bytes()),
            (Some("b"), 250i64.to_be_bytes()),
        ],
    );
    let out = kafka.wait_for(&large, Duration::from_secs(60), |r| !r.is_empty());
    assert!(app.close(Duration::from_secs(30)));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].key.as_deref(), Some(&b"b"[..]));
    assert_eq!(out[0].value.as_deref(), Some(&250i64.to_be_bytes()[..]));
}

/// `group_members` lists a running application's stream threads and the
/// partitions each owns: two threads on a two-partition topic end up with
/// one partition each.
#[test]
fn group_members_shows_each_stream_thread_and_its_partitions() {
    let kafka = testing::broker();
    let (input, output) = (unique_name("members-in"), unique_name("members-out"));
    kafka.create_topics(&[(&input, 2), (&output, 2)]);
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(&input, Consumed::new())
        .to(&output, Produced::new());
    let app_id = unique_name("members-app");
    let mut config = kafka.streams_config(&app_id);
    config.num_stream_threads = 2;
    let mut app = KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().unwrap();

    let members = common::counting::wait_until(
        Duration::from_secs(60),
        Duration::from_millis(200),
        &mut [],
        || {
            testing::group_members(kafka.bootstrap_servers(), &app_id, Duration::from_secs(10))
                .expect("describing the group")
        },
        |members| members.len() == 2 && members.iter().all(|m| m.assignment.len() == 1),
    );
    assert!(app.close(Duration::from_secs(30)));
    assert_eq!(members.len(), 2, "members: {members:?}");
    let mut owned: Vec<(String, i32)> = members
        .iter()
        .inspect(|m| assert!(m.client_id.starts_with(&app_id), "{m:?}"))
        .flat_map(|m| m.assignment.clone())
        .collect();
    owned.sort();
    assert_eq!(owned, vec![(input.clone(), 0), (input.clone(), 1)]);
    assert!(
        testing::group_members(
            kafka.bootstrap_servers(),
            "no-such-group",
            Duration::from_secs(10)
        )
        .expect("describing an unknown group")
        .is_empty()
    );
}
