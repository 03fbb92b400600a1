//! The `range` assignor gives each member the same partition numbers of
//! every subscribed topic with equal partition counts: the co-partitioning
//! property Weir's tasks rely on.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

#[tokio::test(flavor = "multi_thread")]
async fn range_assignor_co_locates_equal_partitions_of_two_topics() {
    let left = common::unique_topic("copart-left");
    let right = common::unique_topic("copart-right");
    common::create_topics(&[(&left, 4), (&right, 4)]).await;
    let group = common::unique_topic("copart-group");

    let (l, r) = (left.clone(), right.clone());
    let assignments = tokio::task::spawn_blocking(move || {
        let make = || -> BaseConsumer {
            let consumer: BaseConsumer = common::base_config()
                .set("group.id", &group)
                .set("partition.assignment.strategy", "range")
                .set("session.timeout.ms", "10000")
                .create()
                .expect("creating a group member failed");
            consumer.subscribe(&[&l, &r]).expect("subscribe failed");
            consumer
        };
        let (a, b) = (make(), make());
        common::poll_until_assigned(&[&a, &b], Duration::from_secs(60), |members| {
            members.iter().all(|m| !m.is_empty())
                && members
                    .iter()
                    .map(|m| m.values().map(HashSet::len).sum::<usize>())
                    .sum::<usize>()
                    == 8
        })
    })
    .await
    .expect("group members panicked");

    let mut seen_left = HashSet::new();
    for member in &assignments {
        let left_parts = member.get(&left).cloned().unwrap_or_default();
        let right_parts = member.get(&right).cloned().unwrap_or_default();
        assert!(
            !left_parts.is_empty(),
            "each member gets work: {assignments:?}"
        );
        assert_eq!(
            left_parts, right_parts,
            "a member holds the same partition numbers of both topics: {assignments:?}"
        );
        for p in left_parts {
            assert!(
                seen_left.insert(p),
                "partition {p} assigned twice: {assignments:?}"
            );
        }
    }
    assert_eq!(seen_left, (0..4).collect::<HashSet<i32>>());

    common::delete_topics(&[&left, &right]).await;
}
