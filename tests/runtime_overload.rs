//! The scaling signal on the real broker (`weir::metrics::scaling`).
//!
//! A topology whose one operator costs 1 ms per record (a sleep: an
//! expensive call, without taking a CPU that a two-core machine does not
//! have) gets input at a fixed rate well above what one thread processes.
//! One instance falls behind and its `GET /scaling` recommends N instances;
//! with N instances at the same rate the group's lag, measured by the test
//! itself (high watermarks minus the group's committed offsets), stays flat.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use weir::config::ProcessingGuarantee;
use weir::runtime::{AppState, KafkaStreams};
use weir::topology::{Consumed, Produced, StreamsBuilder};

const PARTITIONS: i32 = 4;
/// Input records per second: about 2× what one thread processes.
const RATE: u64 = 1_800;
const COST: Duration = Duration::from_millis(1);

fn instance(app_id: &str, input: &str, output: &str, dir: &std::path::Path) -> KafkaStreams {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(input, Consumed::new())
        .map_values(|v: String| {
            std::thread::sleep(COST);
            v
        })
        .to(output, Produced::new());
    let mut config = weir::config::StreamsConfig::new(app_id, common::bootstrap());
    config.state_dir = dir.to_path_buf();
    config.processing_guarantee = ProcessingGuarantee::AtLeastOnce;
    config.commit_interval_ms = Some(500);
    // Longer than the lag statistics interval (5 s), as the default (10 s).
    config.scaling_window_ms = 10_000;
    config.http_bind = Some("127.0.0.1:0".parse().unwrap());
    let mut app = KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().unwrap();
    app
}

/// Writes [`RATE`] records per second to `topic` until `stop`.
fn produce_at_rate(topic: &str, stop: &AtomicBool) -> u64 {
    let producer: ThreadedProducer<DefaultProducerContext> = common::base_config()
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let started = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * RATE as f64) as u64;
        while sent < due {
            let key = format!("k{}", sent % 1000);
            let value = format!("v{sent}");
            if producer
                .send(BaseRecord::to(topic).key(&key).payload(&value))
                .is_ok()
            {
                sent += 1;
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    sent
}

/// The group's lag: high watermark minus committed offset, summed.
fn group_lag(app_id: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", app_id)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    let mut lag = 0;
    for p in 0..PARTITIONS {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        let at = match committed.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => o,
            _ => low,
        };
        lag += high - at;
    }
    lag
}

fn scaling(app: &KafkaStreams) -> Option<serde_json::Value> {
    let (status, body) = common::weir_app::get_json(app.http_addr()?, "/scaling");
    (status == 200).then_some(body)
}

fn wait_running(apps: &[&KafkaStreams], timeout: Duration) {
    let until = Instant::now() + timeout;
    while apps.iter().any(|a| a.state() != AppState::Running) {
        assert!(Instant::now() < until, "instances not running");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_overloaded_instance_recommends_the_instances_that_keep_the_lag_flat() {
    let app_id = common::unique_topic("scaling-signal");
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[
            (&input, PARTITIONS),
            (&output, PARTITIONS),
        ]));
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || produce_at_rate(&input, &stop))
    };

    // One instance: it falls behind.
    let mut first = instance(&app_id, &input, &output, &dir.path().join("0"));
    wait_running(&[&first], Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(6));
    let lag_before = group_lag(&app_id, &input);
    std::thread::sleep(Duration::from_secs(10));
    let lag_after = group_lag(&app_id, &input);
    println!("one instance: lag {lag_before} → {lag_after} in 10 s");
    assert!(
        lag_after > lag_before + RATE as i64 * 10 / 4,
        "one instance at {RATE}/s falls behind: lag {lag_before} → {lag_after}"
    );
    // The first window (start-up: no lag statistics yet) gives no answer.
    let until = Instant::now() + Duration::from_secs(40);
    let answer = loop {
        if let Some(answer) = scaling(&first) {
            break answer;
        }
        assert!(Instant::now() < until, "GET /scaling does not answer");
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("GET /scaling: {answer:#}");
    let recommended = answer["recommended_instances"].as_u64().unwrap();
    let sub = &answer["subtopologies"][0];
    let input_rate = sub["input_rate"].as_f64().unwrap();
    let true_rate = sub["true_rate_per_thread"].as_f64().unwrap();
    assert!(
        (input_rate - RATE as f64).abs() < RATE as f64 * 0.3,
        "input rate {input_rate}/s measured, {RATE}/s written"
    );
    assert!(
        true_rate > 500.0 && true_rate < 1_000.0,
        "a 1 ms operator processes under 1,000 records per busy second: {true_rate}"
    );
    assert!(
        (2..=PARTITIONS as u64).contains(&recommended),
        "recommends more instances than one, at most the partitions: {recommended}"
    );
    let gauge: u64 = first
        .metrics()
        .encode_text()
        .lines()
        .find(|l| l.starts_with("weir_recommended_instances{"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("weir_recommended_instances is exported");
    assert!(
        (2..=PARTITIONS as u64).contains(&gauge),
        "the gauge says so too: {gauge}"
    );

    // As many instances as recommended, at the same rate: the lag is flat
    // (the backlog of the first phase drains, so it may only shrink).
    let mut more: Vec<KafkaStreams> = (1..recommended)
        .map(|i| instance(&app_id, &input, &output, &dir.path().join(i.to_string())))
        .collect();
    let mut all: Vec<&KafkaStreams> = vec![&first];
    all.extend(more.iter());
    wait_running(&all, Duration::from_secs(90));
    std::thread::sleep(Duration::from_secs(10));
    let start = group_lag(&app_id, &input);
    std::thread::sleep(Duration::from_secs(15));
    let end = group_lag(&app_id, &input);
    println!("{recommended} instances: lag {start} at start, {end} 15 s later");
    assert!(
        end <= start + RATE as i64,
        "{recommended} instances keep up: lag {start} → {end} in 15 s at {RATE}/s"
    );
    let answer = scaling(&first).expect("GET /scaling");
    println!(
        "GET /scaling after scaling out: recommended {} (threads needed {})",
        answer["recommended_instances"], answer["threads_needed"]
    );

    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    println!("{written} records written at {RATE}/s");
    for app in more.iter_mut() {
        assert!(app.close(Duration::from_secs(60)));
    }
    assert!(first.close(Duration::from_secs(60)));
}
