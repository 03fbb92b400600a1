//! The real broker honours transactions: a `read_committed` reader sees the
//! records of a committed transaction and none of an aborted one.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

#[tokio::test(flavor = "multi_thread")]
async fn read_committed_sees_exactly_the_committed_transaction() {
    let topic = common::unique_topic("txn");
    common::create_topics(&[(&topic, 4)]).await;

    let producer: BaseProducer = common::base_config()
        .set("transactional.id", common::unique_topic("txn-producer"))
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        .create()
        .expect("creating the transactional producer failed");
    let timeout = Duration::from_secs(30);
    let topic_for_producer = topic.clone();
    // Transaction calls block: keep them off the async worker threads.
    tokio::task::spawn_blocking(move || {
        let topic = topic_for_producer;
        producer
            .init_transactions(timeout)
            .expect("init_transactions");

        let send_all = |range: std::ops::Range<u32>, tag: &str| {
            for i in range {
                let key = format!("{tag}-{i}");
                let value = format!("value-{i}");
                let mut record = BaseRecord::to(&topic).key(&key).payload(&value);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((_, back)) => {
                            record = back;
                            producer.poll(Duration::from_millis(10));
                        }
                    }
                }
                producer.poll(Duration::ZERO);
            }
        };

        producer.begin_transaction().expect("begin_transaction");
        send_all(0..10_000, "committed");
        producer
            .commit_transaction(timeout)
            .expect("commit_transaction");

        producer.begin_transaction().expect("begin_transaction");
        send_all(0..1_000, "aborted");
        producer.flush(timeout).expect("flush before abort");
        producer
            .abort_transaction(timeout)
            .expect("abort_transaction");
    })
    .await
    .expect("producer task panicked");

    let committed = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || common::read_to_end(&topic)
    })
    .await
    .unwrap();
    assert_eq!(
        committed.len(),
        10_000,
        "read_committed must see exactly the committed records"
    );
    let keys: HashSet<String> = committed
        .iter()
        .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(keys.len(), 10_000, "no duplicates");
    assert!(
        keys.iter().all(|k| k.starts_with("committed-")),
        "no aborted record is visible"
    );
    let partitions: HashSet<i32> = committed.iter().map(|r| r.partition).collect();
    assert_eq!(partitions.len(), 4, "keys spread over all 4 partitions");

    // The aborted records were really written: read_uncommitted sees them.
    let everything = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || common::read_to_end_with(&topic, "read_uncommitted")
    })
    .await
    .unwrap();
    assert_eq!(
        everything.len(),
        11_000,
        "read_uncommitted sees the aborted records too"
    );

    common::delete_topics(&[&topic]).await;
}
