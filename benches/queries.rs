//! Local interactive query latency: `KeyValueQuery::get` on a running
//! instance of word count (exactly-once, 4 partitions, every task local)
//! against the real broker of `weir::testing` (`KAFKA_BOOTSTRAP_SERVERS`,
//! or a container when a Docker engine is reachable); without one the
//! benchmark says so and measures nothing. Two cases: the stream thread
//! idle (the query reads its stores directly under its lock) and input
//! flowing (the query waits for the thread to answer between rounds).
//!
//! Run: `KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 cargo bench --bench queries`.
//!
//! Figures of one brief run (2026-12-02, 2 shared cores, the broker on
//! them too; dev profile with Weir at opt-level 3, `--warm-up-time 1
//! --measurement-time 3`), median per `get`: thread idle 3.0 µs, input
//! flowing (2,000 lines/s) 3.2 µs.
//! Routed HTTP queries per second are measured by `scripts/bench queries`
//! (BENCHMARKS.md).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams};
use weir::topologies::word_count;

fn get(c: &mut Criterion) {
    if std::env::var_os("KAFKA_BOOTSTRAP_SERVERS").is_none() {
        eprintln!(
            "queries bench: set KAFKA_BOOTSTRAP_SERVERS to a broker (scripts/kafka start); nothing measured"
        );
        return;
    }
    let kafka = weir::testing::broker();
    let app = weir::testing::unique_name("bench-query");
    let (input, output) = (format!("{app}-in"), format!("{app}-out"));
    kafka.create_topics(&[(&input, 4), (&output, 4)]);
    let params = word_count::WORD_COUNT
        .params(&BTreeMap::from([
            ("input_topic".to_string(), input.clone()),
            ("output_topic".to_string(), output.clone()),
        ]))
        .expect("word-count parameters");
    let state = tempfile::tempdir().expect("a state directory");
    let config = StreamsConfig::from_pairs([
        ("application_id", app.as_str()),
        ("bootstrap_servers", kafka.bootstrap_servers()),
        ("state_dir", &state.path().display().to_string()),
        ("processing_guarantee", "exactly_once_v2"),
    ])
    .expect("config");
    let mut streams =
        KafkaStreams::new(word_count::build(&params).expect("topology"), config).expect("app");
    streams.start().expect("start");
    kafka.produce(&input, (0..2_000).map(word_count::sample));
    let counts = streams
        .key_value_store::<String, i64>("counts")
        .expect("the counts store");
    let word = "kafka".to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    while streams.state() != AppState::Running || !matches!(counts.get(&word), Ok(Some(_))) {
        assert!(Instant::now() < deadline, "word count did not start");
        std::thread::sleep(Duration::from_millis(200));
    }

    c.bench_function("get, stream thread idle", |b| {
        b.iter(|| black_box(counts.get(black_box(&word)).expect("a count")))
    });

    // Input flowing: a producer writes sample lines while the gets run.
    let flowing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (flowing, input) = (flowing.clone(), input.clone());
        std::thread::spawn(move || {
            let mut next = 2_000;
            while flowing.load(Ordering::SeqCst) {
                weir::testing::broker().produce(&input, (next..next + 100).map(word_count::sample));
                next += 100;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    c.bench_function("get, input flowing", |b| {
        b.iter(|| black_box(counts.get(black_box(&word)).expect("a count")))
    });
    flowing.store(false, Ordering::SeqCst);
    producer.join().expect("the producer");
    streams.close(Duration::from_secs(30));
}

criterion_group!(benches, get);
criterion_main!(benches);
