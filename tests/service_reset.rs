//! `weir reset` on the real broker: it refuses while an instance runs; after
//! the instance stops it deletes the group, the internal topics and the
//! local state, and a second run reprocesses the input from the start and
//! writes the same counts.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use weir::config::StreamsConfig;
use weir::runtime::KafkaStreams;

const LINES: u64 = 500;

fn counts(topic: &str) -> BTreeMap<String, i64> {
    common::latest_per_key(topic)
        .into_iter()
        .map(|(k, v)| {
            let v = v.expect("counts are never null");
            (
                String::from_utf8(k).unwrap(),
                i64::from_be_bytes(v.as_slice().try_into().unwrap()),
            )
        })
        .collect()
}

/// Runs word count from `input` to `output` until every word is counted;
/// `while_running` runs against the live instance.
fn run_once(
    app_id: &str,
    input: &str,
    output: &str,
    state_dir: &std::path::Path,
    while_running: impl FnOnce(),
) -> BTreeMap<String, i64> {
    let shipped = weir::topologies::find("word-count").unwrap();
    let mut given = BTreeMap::new();
    given.insert("input_topic".to_string(), input.to_string());
    given.insert("output_topic".to_string(), output.to_string());
    let topology = (shipped.build)(&shipped.params(&given).unwrap()).unwrap();
    let config = StreamsConfig::from_pairs([
        ("application_id", app_id),
        ("bootstrap_servers", common::bootstrap().as_str()),
        ("processing_guarantee", "exactly_once_v2"),
        ("state_dir", state_dir.to_str().unwrap()),
    ])
    .unwrap();
    let mut app = KafkaStreams::new(topology, config).unwrap();
    app.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let result = loop {
        let c = counts(output);
        if c.values().sum::<i64>() == (LINES * 5) as i64 {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "not every word counted within 120 s: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    while_running();
    assert!(app.close(Duration::from_secs(60)));
    result
}

fn weir_reset(app_id: &str, state_dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["reset", "--application-id", app_id, "--bootstrap-servers"])
        .arg(common::bootstrap())
        .arg("--state-dir")
        .arg(state_dir)
        .env("WEIR_LOG", "warn")
        .output()
        .expect("running weir reset")
}

fn topics_of(app_id: &str) -> Vec<String> {
    let client: rdkafka::consumer::BaseConsumer = common::base_config().create().unwrap();
    use rdkafka::consumer::Consumer;
    let metadata = client
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| n.starts_with(app_id))
        .collect()
}

#[test]
fn reset_then_run_reprocesses_from_the_start_with_the_same_output() {
    let app_id = common::unique_topic("svc-reset");
    let input = common::unique_topic("svc-reset-lines");
    let first_out = common::unique_topic("svc-reset-first");
    let second_out = common::unique_topic("svc-reset-second");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(common::create_topics(&[
        (&input, 2),
        (&first_out, 2),
        (&second_out, 2),
    ]));
    let records: Vec<_> = (0..LINES)
        .map(weir::topologies::word_count::sample)
        .collect();
    common::produce_batch(&input, &records);
    let state = tempfile::tempdir().unwrap();

    let first = run_once(&app_id, &input, &first_out, state.path(), || {
        let refused = weir_reset(&app_id, state.path());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success(),
            "reset ran while an instance was up"
        );
        assert!(stderr.contains("active member"), "{stderr}");
    });
    let mut internal = topics_of(&app_id);
    internal.sort();
    assert_eq!(
        internal,
        vec![
            format!("{app_id}-counts-changelog"),
            format!("{app_id}-counts-repartition")
        ]
    );
    assert!(state.path().join(&app_id).exists());

    let reset = weir_reset(&app_id, state.path());
    let stderr = String::from_utf8_lossy(&reset.stderr);
    assert!(reset.status.success(), "weir reset failed: {stderr}");
    eprintln!("{stderr}");
    assert!(stderr.contains("consumer group deleted"), "{stderr}");
    assert!(
        topics_of(&app_id).is_empty(),
        "internal topics survived the reset"
    );
    assert!(!state.path().join(&app_id).exists(), "local state survived");

    // The same application again, writing to a fresh topic: only a full
    // reprocessing from the first input record (with empty state) can
    // produce the first run's counts there.
    let second = run_once(&app_id, &input, &second_out, state.path(), || {});
    assert_eq!(second, first);
    assert_eq!(first.values().sum::<i64>(), (LINES * 5) as i64);
}
