//! Clear errors at start-up (missing source topic, mismatched partition
//! counts, unreachable broker, state directory) and while running (internal
//! topic deleted, disk full), and poison records following the configured
//! handler on the real broker.

mod common;

use std::time::{Duration, Instant};

use common::weir_app::WeirApp;
use weir::config::StreamsConfig;
use weir::runtime::{KafkaStreams, StreamsError};
use weir::topology::{Consumed, Produced, StreamsBuilder};

fn config(app: &str, bootstrap: &str, dir: &std::path::Path) -> StreamsConfig {
    let mut c = StreamsConfig::new(app, bootstrap);
    c.state_dir = dir.to_path_buf();
    c
}

fn passthrough(inputs: &[&str], output: &str) -> weir::topology::Topology {
    let builder = StreamsBuilder::new();
    let mut stream = builder.stream::<String, String>(inputs[0], Consumed::new());
    for input in &inputs[1..] {
        stream = stream.merge(&builder.stream::<String, String>(input, Consumed::new()));
    }
    stream.to(output, Produced::new());
    builder.build().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_source_topic_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = common::unique_topic("no-such-topic");
    let mut app = KafkaStreams::new(
        passthrough(&[&missing], "out"),
        config(
            &common::unique_topic("missing"),
            &common::bootstrap(),
            dir.path(),
        ),
    )
    .unwrap();
    let err = tokio::task::spawn_blocking(move || app.start().unwrap_err())
        .await
        .unwrap();
    assert!(
        matches!(&err, StreamsError::MissingSourceTopic { topic } if *topic == missing),
        "{err}"
    );
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn co_partitioned_sources_must_have_equal_partition_counts() {
    let (a, b) = (
        common::unique_topic("copart-a"),
        common::unique_topic("copart-b"),
    );
    common::create_topics(&[(&a, 2), (&b, 4)]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut app = KafkaStreams::new(
        passthrough(&[&a, &b], "out"),
        config(
            &common::unique_topic("mismatch"),
            &common::bootstrap(),
            dir.path(),
        ),
    )
    .unwrap();
    let err = tokio::task::spawn_blocking(move || app.start().unwrap_err())
        .await
        .unwrap();
    match &err {
        StreamsError::NotCopartitioned { topics, counts } => {
            assert_eq!(topics.len(), 2);
            let mut c = counts.clone();
            c.sort();
            assert_eq!(c, vec![2, 4]);
        }
        other => panic!("expected NotCopartitioned, got {other}"),
    }
    assert!(err.to_string().contains("equal partition counts"), "{err}");
    common::delete_topics(&[&a, &b]).await;
}

#[test]
fn unreachable_broker_fails_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1 of loopback.
    let mut c = config("unreachable", "127.0.0.1:1", dir.path());
    assert_eq!(
        c.startup_timeout_ms, 60_000,
        "a broker restart is waited for"
    );
    c.set("startup_timeout_ms", "3000").unwrap();
    let mut app = KafkaStreams::new(passthrough(&["in"], "out"), c).unwrap();
    let started = Instant::now();
    let err = app.start().unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "retries for startup_timeout_ms, then fails: {took:?}"
    );
    assert!(matches!(err, StreamsError::Kafka { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("is the broker reachable? start-up retried for 3 s"),
        "{err}"
    );
}

#[test]
fn invalid_config_names_the_key() {
    let err = StreamsConfig::from_pairs([
        ("application_id", "app"),
        ("bootstrap_servers", "127.0.0.1:9092"),
        ("commit_interval_ms", "soon"),
    ])
    .unwrap_err();
    assert_eq!(err.key, "commit_interval_ms");
}

/// A non-UTF-8 line is a poison record for word-count's String value serde.
fn poison_run(handler: &str) -> (WeirApp, String, String, tempfile::TempDir) {
    let app_id = common::unique_topic("poison");
    let input = format!("{app_id}-lines");
    let output = format!("{app_id}-out");
    let dlq = format!("{app_id}-dlq");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(common::create_topics(&[
        (&input, 2),
        (&output, 2),
        (&dlq, 1),
    ]));
    let mut records: Vec<(Option<Vec<u8>>, Vec<u8>)> = Vec::new();
    for i in 0..50 {
        records.push((Some(format!("k{i}").into_bytes()), b"alpha beta".to_vec()));
    }
    records.insert(20, (Some(b"k20".to_vec()), vec![0xff, 0xfe, 0x00]));
    common::produce_batch(&input, &records);
    let dir = tempfile::tempdir().unwrap();
    let settings = vec![
        format!("application_id={app_id}"),
        "processing_guarantee=exactly_once_v2".to_string(),
        format!("topology.input_topic={input}"),
        format!("topology.output_topic={output}"),
        format!("deserialization_handler={}", handler.replace("DLQ", &dlq)),
    ];
    let app = WeirApp::start(
        "word-count",
        &dir.path().join("state"),
        &dir.path().join("log"),
        &settings,
    );
    (app, output, dlq, dir)
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    false
}

#[test]
fn poison_record_goes_to_the_dead_letter_topic_and_processing_goes_on() {
    let (mut app, output, dlq, _dir) = poison_run("dead_letter:DLQ");
    let counted = wait_until(Duration::from_secs(120), || {
        let table = common::latest_per_key(&output);
        table.get(b"alpha".as_slice()).and_then(|v| v.clone()) == Some(50i64.to_be_bytes().to_vec())
            && table.get(b"beta".as_slice()).and_then(|v| v.clone())
                == Some(50i64.to_be_bytes().to_vec())
    });
    assert!(
        counted,
        "the 50 good lines are counted; log:\n{}",
        app.log_text()
    );
    let dead = common::read_to_end(&dlq);
    assert_eq!(dead.len(), 1, "exactly the poison record is dead-lettered");
    assert_eq!(
        dead[0].value.as_deref(),
        Some([0xff, 0xfe, 0x00].as_slice()),
        "original bytes kept"
    );
    let input = output.replace("-out", "-lines");
    assert_eq!(
        dead[0].header(weir::handler::HEADER_TOPIC).as_deref(),
        Some(input.as_str())
    );
    assert!(
        dead[0].header(weir::handler::HEADER_OFFSET).is_some(),
        "offset header"
    );
    assert!(
        dead[0]
            .header(weir::handler::HEADER_MESSAGE)
            .is_some_and(|m| !m.is_empty()),
        "reason header"
    );
    assert!(app.is_running(), "the application keeps running");
    assert_eq!(app.stop(), Some(0));
}

#[test]
fn poison_record_under_log_and_fail_stops_with_its_coordinates() {
    let (mut app, _output, _dlq, _dir) = poison_run("log_and_fail");
    let stopped = wait_until(Duration::from_secs(60), || !app.is_running());
    assert!(stopped, "the application stops; log:\n{}", app.log_text());
    let log = app.log_text();
    assert!(
        log.contains("could not deserialize the value of the record at"),
        "{log}"
    );
    assert!(
        log.contains("-lines/"),
        "the error names topic/partition@offset: {log}"
    );
}

#[test]
fn a_replication_factor_above_the_broker_count_stops_start_with_the_setting_named() {
    let app_id = common::unique_topic("rf-too-high");
    let (input, output) = (format!("{app_id}-lines"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 1), (&output, 1)]));
    let shipped = weir::topologies::find("word-count").unwrap();
    let given = [
        ("input_topic".to_string(), input.clone()),
        ("output_topic".to_string(), output.clone()),
    ]
    .into();
    let topology = (shipped.build)(&shipped.params(&given).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&app_id, &common::bootstrap(), dir.path());
    // The test broker is a single node.
    c.set("replication_factor", "2").unwrap();
    let mut app = KafkaStreams::new(topology, c).unwrap();
    let err = app.start().unwrap_err().to_string();
    assert!(
        err.contains(&format!("creating topic '{app_id}-counts-"))
            && err.contains("replication_factor must not exceed the number of brokers"),
        "{err}"
    );
}

#[test]
fn an_internal_topic_deleted_while_running_stops_with_its_name() {
    let app_id = common::unique_topic("deleted-changelog");
    let (input, output) = (format!("{app_id}-lines"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 2), (&output, 2)]));
    let lines = |from: usize| -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
        (from..from + 50)
            .map(|i| (Some(format!("k{i}").into_bytes()), b"alpha beta".to_vec()))
            .collect()
    };
    common::produce_batch(&input, &lines(0));
    let dir = tempfile::tempdir().unwrap();
    let settings = vec![
        format!("application_id={app_id}"),
        "processing_guarantee=exactly_once_v2".to_string(),
        format!("topology.input_topic={input}"),
        format!("topology.output_topic={output}"),
    ];
    let mut app = WeirApp::start(
        "word-count",
        &dir.path().join("state"),
        &dir.path().join("log"),
        &settings,
    );
    let counted = wait_until(Duration::from_secs(120), || {
        common::counting::output_counts(&output).get("alpha") == Some(&50)
    });
    assert!(counted, "the first 50 lines are counted");
    let changelog = format!("{app_id}-counts-changelog");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::delete_topics(&[&changelog]));
    common::produce_batch(&input, &lines(50));
    let deleted = Instant::now();
    let stopped = wait_until(Duration::from_secs(90), || !app.is_running());
    let log = app.log_text();
    assert!(
        stopped,
        "still running 90 s after its changelog was deleted; its log:\n{}",
        common::counting::tail(&log)
    );
    println!(
        "stopped {:?} after the changelog was deleted",
        deleted.elapsed()
    );
    assert_eq!(app.exit_code(), Some(1), "{}", common::counting::tail(&log));
    assert!(
        log.contains(&format!(
            "internal topic '{changelog}' was deleted while the application ran"
        )),
        "{}",
        common::counting::tail(&log)
    );
}

#[test]
fn a_session_timeout_the_broker_refuses_stops_the_instance_with_what_to_set() {
    let app_id = common::unique_topic("short-session");
    let input = format!("{app_id}-in");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 1)]));
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(&app_id, &common::bootstrap(), dir.path());
    c.set("group_protocol", "classic").unwrap();
    // Becomes the session timeout, below the broker's 6 s minimum.
    c.consumer_overrides
        .insert("max.poll.interval.ms".into(), "3000".into());
    let mut app = KafkaStreams::new(passthrough(&[&input], &format!("{app_id}-out")), c).unwrap();
    app.start().unwrap();
    let state = app.wait_for_state(Duration::from_secs(60), |s| {
        s == weir::runtime::AppState::Error
    });
    assert_eq!(
        state,
        weir::runtime::AppState::Error,
        "the instance kept joining"
    );
    let err = app.error().expect("the error is kept").to_string();
    println!("{err}");
    assert!(
        err.contains("session timeout of 3000 ms")
            && err.contains("derived from max.poll.interval.ms")
            && err.contains("set consumer.session.timeout.ms"),
        "{err}"
    );
}

#[test]
fn a_state_dir_that_cannot_be_created_stops_start_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where a directory must go (the tests run as root, so
    // permissions alone would not stop it).
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let app_id = common::unique_topic("bad-state-dir");
    let input = format!("{app_id}-in");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 1)]));
    let c = config(&app_id, &common::bootstrap(), &file.join("state"));
    let mut app = KafkaStreams::new(passthrough(&[&input], &format!("{app_id}-out")), c).unwrap();
    let err = app.start().unwrap_err().to_string();
    println!("{err}");
    assert!(err.contains("not-a-dir"), "names the path: {err}");
}

/// A tmpfs mounted for one test; unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// Mounts a tmpfs of `mib` MiB at `dir` (the tests run as root).
    fn mount(dir: &std::path::Path, mib: u32) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a {mib} MiB tmpfs at {} (needs root)",
            dir.display()
        );
        SmallDisk(dir.to_path_buf())
    }

    /// Writes file `name` until the disk is full.
    fn fill(&self, name: &str) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join(name);
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![7u8; 64 << 10];
        while file.write_all(&chunk).and_then(|()| file.flush()).is_ok() {}
        let _ = file.sync_all();
        path
    }

    /// `df`'s line for the disk.
    fn usage(&self) -> String {
        let out = std::process::Command::new("df")
            .arg("-B1")
            .arg(&self.0)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines().last().unwrap_or("df failed").to_string()
    }

    /// Appends to `path` (a file [`SmallDisk::fill`] wrote) until the disk
    /// is full again: takes what the instance freed (RocksDB deletes a
    /// write-ahead log once its memtable is flushed, and a word count's
    /// store does not grow, so the freed room could last it for good).
    fn top_up(path: &std::path::Path) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        let chunk = vec![7u8; 4 << 10];
        while file.write_all(&chunk).and_then(|()| file.flush()).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_stops_the_instance_with_the_reason_and_the_store_is_sound_after() {
    use common::counting::{Fixture, tail, wait_for_output, word_count_truth};
    let mut f = Fixture::new("disk-full", &weir::topologies::word_count::WORD_COUNT);
    // Every update reaches the store (no record cache), and a small memory
    // budget makes RocksDB flush memtables (and start new write-ahead logs)
    // often, so a full disk is hit within seconds of input.
    f.extra.push("state_memory_budget_bytes=1048576".into());
    f.extra.push("cache_max_bytes=0".into());
    let disk = SmallDisk::mount(&f.dir.path().join("instance-0"), 32);
    let guarantee = "exactly_once_v2";
    let mut app = f.start(0, guarantee);
    let step = 20_000;
    f.produce(0, step);
    wait_for_output(&f.output, Duration::from_secs(120), &mut [&mut app], |c| {
        *c == word_count_truth(step)
    });

    // The disk fills while the instance runs.
    let filler = disk.fill("filler");
    let full = Instant::now();
    // Input keeps coming until the instance stops; the disk stays full.
    let mut produced = step;
    while app.is_running() && full.elapsed() < Duration::from_secs(120) {
        f.produce(produced, step / 4);
        produced += step / 4;
        wait_until(Duration::from_secs(5), || {
            SmallDisk::top_up(&filler);
            !app.is_running()
        });
    }
    let stopped = !app.is_running();
    let log = app.log_text();
    assert!(
        stopped,
        "still running 120 s after the disk filled ({}; counted {} of {produced} lines):\n{}",
        disk.usage(),
        // Five words a line.
        common::counting::output_counts(&f.output)
            .values()
            .sum::<i64>()
            / 5,
        tail(&log)
    );
    println!("stopped {:?} after the disk filled", full.elapsed());
    assert_eq!(app.exit_code(), Some(1), "{}", tail(&log));
    assert!(
        log.contains("No space left on device"),
        "the error says the disk is full:\n{}",
        tail(&log)
    );
    let reason = log
        .lines()
        .rfind(|l| l.contains("No space left on device"))
        .unwrap_or_default()
        .to_string();
    println!("reason: {reason}");

    // Started again on the full disk (what closing the stores freed is
    // filled too): a clear error, not a retry loop.
    let refill = disk.fill("filler-2");
    let mut again = f.start(0, guarantee);
    let stopped = wait_until(Duration::from_secs(60), || !again.is_running());
    let log = again.log_text();
    assert!(stopped, "running on a full disk:\n{}", tail(&log));
    assert_eq!(again.exit_code(), Some(1), "{}", tail(&log));
    assert!(
        log.contains("No space left on device"),
        "the error says the disk is full:\n{}",
        tail(&log)
    );
    println!(
        "on restart: {}",
        log.lines()
            .rfind(|l| l.contains("No space left on device"))
            .unwrap_or_default()
    );

    // With room again, the stores open as they were and the counts are exact.
    std::fs::remove_file(filler).unwrap();
    std::fs::remove_file(refill).unwrap();
    let mut healed = f.start(0, guarantee);
    wait_for_output(
        &f.output,
        Duration::from_secs(120),
        &mut [&mut healed],
        |c| *c == word_count_truth(produced),
    );
    let log = healed.log_text();
    common::counting::restores("after the disk had room", &healed);
    assert!(
        !log.contains("corrupt"),
        "no store was found corrupt:\n{}",
        tail(&log)
    );
    assert_eq!(healed.stop(), Some(0), "{}", tail(&log));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_topic_created_just_after_the_start_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let late = common::unique_topic("late-source");
    let mut app = KafkaStreams::new(
        passthrough(&[&late], &common::unique_topic("late-out")),
        config(
            &common::unique_topic("late"),
            &common::bootstrap(),
            dir.path(),
        ),
    )
    .unwrap();
    let starting = tokio::task::spawn_blocking(move || {
        let started = app.start();
        app.close(Duration::from_secs(30));
        started
    });
    // Created while start-up already looked for it (a broker whose
    // metadata lags a topic just created looks the same).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    common::create_topics(&[(&late, 2)]).await;
    let started = starting.await.unwrap();
    assert!(
        started.is_ok(),
        "start-up waits a few seconds for a missing source topic: {started:?}"
    );
}
