//! A task handed from one stream thread to another of the same instance
//! while the first still has it open, on the real broker.
//!
//! A thread stuck in a processor for longer than `max.poll.interval.ms`
//! loses its group membership; the broker gives its partitions to the
//! other thread at once, while the stuck thread still holds their stores
//! open (it learns of the loss only at its next poll). The other thread
//! must wait for the task, not fail: it retries opening it after a backoff
//! (Kafka Streams' lock-and-retry of a task directory), and once the stuck
//! thread has aborted and closed it, takes it over. The counts, read back
//! with `read_committed`, equal those computed from the input: the stuck
//! thread's transaction was aborted, nothing was counted twice. Under both
//! group protocols: KIP-848's `consumer` (incremental) and `classic`
//! (eager).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::counting::output_counts;
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams};
use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};

/// How long the one stalling record holds its thread: well past
/// [`MAX_POLL_INTERVAL_MS`].
const STALL: Duration = Duration::from_secs(10);
/// The lowest the classic protocol allows: it becomes the session timeout,
/// which the broker refuses below its `group.min.session.timeout.ms` (6 s).
const MAX_POLL_INTERVAL_MS: &str = "6000";
const KEYS: usize = 40;
const PER_KEY: usize = 5;

/// Counts records per key; the first record with value `stall` holds its
/// thread for [`STALL`] and sets `stalled` (the thread that takes the task
/// over processes it again, without stalling).
fn counting_app(
    app_id: &str,
    protocol: &str,
    input: &str,
    output: &str,
    dir: &std::path::Path,
    stalled: Arc<AtomicBool>,
) -> KafkaStreams {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(input, Consumed::new())
        .map_values(move |v: String| {
            if v == "stall" && !stalled.swap(true, Ordering::SeqCst) {
                std::thread::sleep(STALL);
            }
            v
        })
        .group_by_key(Grouped::new())
        .count(Materialized::as_("counts"))
        .to_stream()
        .to(output, Produced::new());
    let mut config = StreamsConfig::from_pairs([
        ("application_id", app_id),
        ("bootstrap_servers", &common::bootstrap()),
        ("state_dir", &dir.display().to_string()),
        ("processing_guarantee", "exactly_once_v2"),
        ("num_stream_threads", "2"),
        ("commit_interval_ms", "100"),
        ("group_protocol", protocol),
    ])
    .unwrap();
    config
        .consumer_overrides
        .insert("max.poll.interval.ms".into(), MAX_POLL_INTERVAL_MS.into());
    let mut app = KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().unwrap();
    app
}

/// `PER_KEY` records for each of the `KEYS` keys.
fn round() -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    (0..PER_KEY)
        .flat_map(|_| (0..KEYS).map(|k| (Some(format!("k{k}").into_bytes()), b"v".to_vec())))
        .collect()
}

/// The counts of `records`, computed without Weir.
fn truth(records: &[(Option<Vec<u8>>, Vec<u8>)]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for (key, _) in records {
        let key = String::from_utf8(key.clone().unwrap()).unwrap();
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// Waits until the committed counts equal `expected`; panics when the
/// instance fails or 120 s pass.
fn wait_for_counts(app: &KafkaStreams, output: &str, expected: &BTreeMap<String, i64>) {
    common::counting::wait_until(
        Duration::from_secs(120),
        Duration::from_millis(250),
        &mut [],
        || {
            if let Some(e) = app.error() {
                panic!("the instance failed: {e}");
            }
            output_counts(output)
        },
        |counts| counts == expected,
    );
}

#[test]
fn a_thread_waits_for_a_task_its_stuck_sibling_still_holds_consumer_protocol() {
    handoff("consumer");
}

#[test]
fn a_thread_waits_for_a_task_its_stuck_sibling_still_holds_classic_protocol() {
    handoff("classic");
}

fn handoff(protocol: &str) {
    let _serial = common::counting::serial();
    let app_id = common::unique_topic(&format!("handoff-{protocol}"));
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 2), (&output, 2)]));
    let dir = tempfile::tempdir().unwrap();
    let stalled = Arc::new(AtomicBool::new(false));
    let app = counting_app(
        &app_id,
        protocol,
        &input,
        &output,
        dir.path(),
        stalled.clone(),
    );
    let running = app.wait_for_state(Duration::from_secs(60), |s| s == AppState::Running);
    assert_eq!(running, AppState::Running);

    let mut input_records = round();
    common::produce_batch(&input, &input_records);
    wait_for_counts(&app, &output, &truth(&input_records));

    // One record stalls its thread past the poll interval; the rest keep
    // both partitions busy.
    let stall = vec![(Some(b"k-stall".to_vec()), b"stall".to_vec())];
    common::produce_batch(&input, &stall);
    input_records.extend(stall);
    let more = round();
    common::produce_batch(&input, &more);
    input_records.extend(more);
    wait_for_counts(&app, &output, &truth(&input_records));

    assert!(
        stalled.load(Ordering::SeqCst),
        "the stalling record was processed"
    );
    let metrics = app.metrics().encode_text();
    assert!(metrics.contains("weir_task_open_waits_total"), "{metrics}");
    let waits = common::weir_app::metric_in(&metrics, "weir_task_open_waits_total", &[]);
    assert!(
        waits >= 1.0,
        "a thread was given a task its stuck sibling still held open ({waits} waits counted)"
    );
    assert_eq!(app.state(), AppState::Running);
    let mut app = app;
    assert!(app.close(Duration::from_secs(30)));
}
