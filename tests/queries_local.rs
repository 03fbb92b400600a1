//! Interactive queries of a running instance's key-value store on the real
//! broker: word count under exactly-once with two stream threads; once the
//! input is processed, `get` of every word returns the word's last count
//! in the output topic (read `read_committed`), a scan of the whole store
//! returns the table once, and wrong names and types are refused.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::counting::{output_counts, serial, word_count_truth};
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams, QueryError};
use weir::topologies::word_count;

const SENTENCES: u64 = 3_000;

#[test]
fn every_word_reads_its_committed_count() {
    let _serial = serial();
    let app = common::unique_topic("query-local");
    let (input, output) = (format!("{app}-in"), format!("{app}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 4), (&output, 4)]));
    let params = word_count::WORD_COUNT
        .params(&BTreeMap::from([
            ("input_topic".to_string(), input.clone()),
            ("output_topic".to_string(), output.clone()),
        ]))
        .unwrap();
    let topology = word_count::build(&params).unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = StreamsConfig::from_pairs([
        ("application_id", app.as_str()),
        ("bootstrap_servers", &common::bootstrap()),
        ("state_dir", &state.path().display().to_string()),
        ("processing_guarantee", "exactly_once_v2"),
        ("num_stream_threads", "2"),
    ])
    .unwrap();
    let mut streams = KafkaStreams::new(topology, config).unwrap();

    // Before the start: typed access is checked, reads are unavailable.
    let counts = streams.key_value_store::<String, i64>("counts").unwrap();
    assert!(
        matches!(
            counts.get(&"kafka".to_string()),
            Err(QueryError::Unavailable { .. })
        ),
        "no answer before the application runs"
    );
    match streams.key_value_store::<String, i64>("count") {
        Err(QueryError::UnknownStore { store, known }) => {
            assert_eq!(
                (store.as_str(), known),
                ("count", vec!["counts".to_string()])
            );
        }
        other => panic!("an unknown store is refused: {:?}", other.err()),
    }
    match streams.key_value_store::<String, String>("counts") {
        Err(e @ QueryError::WrongTypes { .. }) => {
            assert!(e.to_string().contains("i64"), "{e}");
        }
        other => panic!("wrong value type is refused: {:?}", other.err()),
    }

    streams.start().unwrap();
    common::produce_samples(&input, word_count::sample, 0, SENTENCES);
    let truth = word_count_truth(SENTENCES);
    let deadline = Instant::now() + Duration::from_secs(180);
    let topic = loop {
        let topic = output_counts(&output);
        if topic == truth || Instant::now() > deadline {
            break topic;
        }
        assert_ne!(streams.state(), AppState::Error, "{:?}", streams.error());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(topic, truth, "the output topic is exact");
    // The group may still settle (the second thread's join moves tasks):
    // wait until this instance's threads run all four count tasks.
    let deadline = Instant::now() + Duration::from_secs(60);
    while counts.tasks().map(|(running, _)| running.len()) != Ok(4) {
        assert!(Instant::now() < deadline, "{:?}", counts.tasks());
        std::thread::sleep(Duration::from_millis(200));
    }

    let started = Instant::now();
    for (word, count) in &topic {
        assert_eq!(
            counts.get(word).unwrap(),
            Some(*count),
            "store count of {word:?} equals its last count in the output topic"
        );
    }
    let per_get = started.elapsed() / topic.len() as u32;
    assert_eq!(counts.get(&"no-such-word".to_string()).unwrap(), None);
    let all: BTreeMap<String, i64> = counts.all().unwrap().into_iter().collect();
    assert_eq!(all, topic, "a scan returns the whole table");
    assert_eq!(counts.all().unwrap().len(), topic.len(), "each word once");
    let first = topic.keys().next().unwrap().clone();
    let last = topic.keys().next_back().unwrap().clone();
    assert_eq!(
        counts.range(Some(&first), Some(&last)).unwrap().len(),
        topic.len()
    );
    assert!(counts.approximate_num_entries().unwrap() > 0);
    println!(
        "{} words read one by one, {per_get:?} per get (through the stream threads)",
        topic.len()
    );
    assert!(streams.close(Duration::from_secs(30)));
}
