//! Re-keying on the real broker: `events-by-type` (`select_key` →
//! `group_by_key` → `count`) goes through its repartition topic, stays exact
//! under exactly-once through 5 SIGKILLs, and the consumed part of the
//! repartition topic is purged (and only that: no time retention).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::counting::{Fixture, crash_run, serial};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir::topologies::events_by_type::{self, EVENTS_BY_TYPE};

/// The true count per event type of the first `n` sample events, computed
/// without Weir.
fn true_counts(n: u64) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let (_, value) = events_by_type::sample(i);
        let event: serde_json::Value = serde_json::from_slice(&value).unwrap();
        let kind = event["type"].as_str().unwrap().to_string();
        *counts.entry(kind).or_insert(0) += 1;
    }
    counts
}

/// `(low watermark, group's committed offset)` of every partition of `topic`.
fn purge_state(topic: &str, group: &str) -> Vec<(i64, i64)> {
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", group)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata.topics()[0].partitions().len() as i32;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    (0..partitions)
        .map(|p| {
            let (low, _) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            let committed = match committed.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(n)) => n,
                _ => -1,
            };
            (low, committed)
        })
        .collect()
}

#[test]
fn select_key_count_is_exact_through_five_sigkills_and_purges_its_repartition_topic() {
    let _serial = serial();
    let mut f = Fixture::new("ebt-crash-eos", &EVENTS_BY_TYPE);
    f.extra.push("repartition_purge_interval_ms=500".into());
    let n = 60_000;
    let truth = true_counts(n);
    let (counts, restores) = crash_run(&f, "exactly_once_v2", n, &truth);
    assert_eq!(counts, truth, "exactly-once survives 5 SIGKILLs");
    assert!(!restores.is_empty(), "restarted instances restored state");

    let repartition = format!("{}-by-field-repartition", f.app_id);
    let config = common::broker().topic_config(&repartition);
    assert_eq!(
        config.get("retention.ms").map(String::as_str),
        Some("-1"),
        "only the purge deletes repartition records, never time"
    );
    let state = purge_state(&repartition, &f.app_id);
    println!("repartition topic (low watermark, committed offset) per partition: {state:?}");
    let purged: i64 = state.iter().map(|(low, _)| low).sum();
    // Offsets count transaction markers and aborted records too, so the
    // committed offsets exceed `n`; every partition was read.
    let committed: i64 = state.iter().map(|(_, c)| c).sum();
    assert!(
        committed >= n as i64,
        "every re-keyed event was consumed: {state:?}"
    );
    assert!(
        purged > 0,
        "consumed repartition records are deleted: {state:?}"
    );
    for (low, committed) in &state {
        // -1: no offset committed (a partition no event type hashes to).
        assert!(
            *low <= (*committed).max(0),
            "never purged past the committed offset: {state:?}"
        );
    }
}
