//! Interactive queries of a running instance's key-value store on the real
//! broker: word count under exactly-once with two stream threads; once the
//! input is processed, `get` of every word returns the word's last count
//! in the output topic (read `read_committed`), a scan of the whole store
//! returns the table once, and wrong names and types are refused. The same
//! over HTTP (`/stores`): every word's count as JSON, the whole table from
//! a range, keys with `/`, `%`, `?`, `#`, spaces and non-ASCII decoded
//! once, and bad requests answered 4xx with a reason.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::counting::{output_counts, serial, word_count_truth};
use common::weir_app::{get_json, percent_encode};
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams, QueryError};
use weir::topologies::word_count;

const SENTENCES: u64 = 3_000;

/// Word count on its own topics (4 partitions), run in this process.
struct WordCount {
    app: String,
    input: String,
    output: String,
    params: weir::topologies::Params,
}

impl WordCount {
    fn new(prefix: &str) -> Self {
        let app = common::unique_topic(prefix);
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
        WordCount {
            app,
            input,
            output,
            params,
        }
    }

    /// An instance (not started) under exactly-once with its state in
    /// `state` and the `extra` settings.
    fn instance(&self, state: &std::path::Path, extra: &[(&str, &str)]) -> KafkaStreams {
        let (state, bootstrap) = (state.display().to_string(), common::bootstrap());
        let mut pairs = vec![
            ("application_id", self.app.as_str()),
            ("bootstrap_servers", bootstrap.as_str()),
            ("state_dir", state.as_str()),
            ("processing_guarantee", "exactly_once_v2"),
        ];
        pairs.extend_from_slice(extra);
        let config = StreamsConfig::from_pairs(pairs).unwrap();
        KafkaStreams::new(word_count::build(&self.params).unwrap(), config).unwrap()
    }
}

#[test]
fn every_word_reads_its_committed_count() {
    let _serial = serial();
    let wc = WordCount::new("query-local");
    let (input, output) = (&wc.input, &wc.output);
    let state = tempfile::tempdir().unwrap();
    let mut streams = wc.instance(
        state.path(),
        &[("num_stream_threads", "2"), ("http_bind", "127.0.0.1:0")],
    );

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
    common::produce_samples(input, word_count::sample, 0, SENTENCES);
    let truth = word_count_truth(SENTENCES);
    let deadline = Instant::now() + Duration::from_secs(180);
    let topic = loop {
        let topic = output_counts(output);
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

    // Over HTTP.
    let addr = streams.http_addr().expect("the HTTP server runs");
    let get = |path: &str| get_json(addr, path);
    let (status, stores) = get("/stores");
    assert_eq!(status, 200);
    assert_eq!(
        stores["stores"],
        serde_json::json!([{"name": "counts", "kind": "key-value", "key_type": "String", "value_type": "i64"}])
    );
    for (word, count) in &topic {
        let (status, answer) = get(&format!("/stores/counts/keys/{}", percent_encode(word)));
        assert_eq!(status, 200, "{word}: {answer}");
        assert_eq!(answer["value"], serde_json::json!(count), "{word}");
        assert_eq!(answer["key"], serde_json::json!(word));
        assert_eq!(answer["served_by"], serde_json::json!(addr.to_string()));
    }
    let (status, range) = get("/stores/counts/range");
    assert_eq!(status, 200);
    let table: BTreeMap<String, i64> = range["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["value"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(table, topic, "the range over all keys is the table");
    assert_eq!(range["entries"].as_array().unwrap().len(), topic.len());
    let (status, bounded) = get(&format!(
        "/stores/counts/range?from={}&to={}",
        percent_encode(&first),
        percent_encode(&first)
    ));
    assert_eq!(
        (status, bounded["entries"].as_array().unwrap().len()),
        (200, 1)
    );

    let odd = "a/b%c?# é";
    let (status, answer) = get(&format!("/stores/counts/keys/{}", percent_encode(odd)));
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains(&format!("{odd:?}")),
        "the key was decoded exactly once: {answer}"
    );
    for (path, status, reason) in [
        ("/stores/nope/keys/x", 404, "no store named \"nope\""),
        ("/stores/counts/keys/%ZZ", 400, "malformed percent-escape"),
        ("/stores/counts/keys/%FF", 400, "UTF-8"),
        ("/stores/counts/range?from=z&to=a", 400, "from is after to"),
        ("/stores/counts/range?since=a", 400, "unknown parameter"),
        ("/stores/counts/other", 404, "no such resource"),
    ] {
        let (got, answer) = get(path);
        assert_eq!(got, status, "{path}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(reason),
            "{path}: {answer}"
        );
    }
    assert!(streams.close(Duration::from_secs(30)));
}

/// Two instances with one standby replica: each word read at instance A
/// with `get_stale` comes from A's active task or, for B's tasks, from A's
/// standby copy (with its lag) — and once the copies caught up, every
/// answer is the word's count.
#[test]
fn stale_reads_come_from_the_standby_copy() {
    let _serial = serial();
    let wc = WordCount::new("query-stale");
    let (input, output) = (&wc.input, &wc.output);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut apps: Vec<KafkaStreams> = dirs
        .iter()
        .map(|dir| {
            let mut streams = wc.instance(dir.path(), &[("num_standby_replicas", "1")]);
            streams.start().unwrap();
            streams
        })
        .collect();
    common::produce_samples(input, word_count::sample, 0, SENTENCES);
    let truth = word_count_truth(SENTENCES);
    let counts = apps[0].key_value_store::<String, i64>("counts").unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let (from_standby, lags) = loop {
        let answers: Vec<_> = truth
            .keys()
            .map(|word| (word, counts.get_stale(word)))
            .collect();
        let exact = answers
            .iter()
            .all(|(word, a)| matches!(a, Ok(s) if s.value == Some(truth[*word])));
        let standby: Vec<_> = answers
            .iter()
            .filter_map(|(_, a)| a.as_ref().ok().filter(|s| s.standby))
            .collect();
        if exact && !standby.is_empty() && output_counts(output) == truth {
            let lags: Vec<Option<i64>> = standby.iter().map(|s| s.lag_records).collect();
            break (standby.len(), lags);
        }
        assert!(
            Instant::now() < deadline,
            "stale reads at instance A: {:?}",
            answers
                .iter()
                .map(|(w, a)| (w, a.as_ref().map(|s| (s.value, s.standby))))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    println!(
        "{} words at instance A: {from_standby} from its standby copies (lags {lags:?}), the rest from its active tasks",
        truth.len()
    );
    assert!(
        lags.iter().all(Option::is_some),
        "standby reads report their lag"
    );
    for streams in &mut apps {
        assert!(streams.close(Duration::from_secs(30)));
    }
}

/// Window and session stores through the library on a running instance:
/// a key's windows (`WindowQuery::fetch`, `fetch_all`) and its sessions
/// (`SessionQuery::fetch`) hold what was counted; kinds are checked.
#[test]
fn window_and_session_stores_read_their_windows() {
    use weir::topology::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
    use weir::windows::{SessionWindows, TimeWindows};
    let _serial = serial();
    let app = common::unique_topic("query-windowed");
    let (windows_in, sessions_in) = (format!("{app}-w"), format!("{app}-s"));
    let (windows_out, sessions_out) = (format!("{app}-wo"), format!("{app}-so"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[
            (&windows_in, 2),
            (&sessions_in, 2),
            (&windows_out, 2),
            (&sessions_out, 2),
        ]));
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(&windows_in, Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by(
            TimeWindows::of_size_with_grace(Duration::from_secs(3600), Duration::ZERO).unwrap(),
        )
        .count(Materialized::as_("per-hour"))
        .to_stream()
        .to(&windows_out, Produced::new());
    builder
        .stream::<String, String>(&sessions_in, Consumed::new())
        .group_by_key(Grouped::new())
        .windowed_by_session(
            SessionWindows::with_inactivity_gap_and_grace(
                Duration::from_millis(500),
                Duration::ZERO,
            )
            .unwrap(),
        )
        .count(Materialized::as_("sessions").with_retention(Duration::from_secs(3600)))
        .to_stream()
        .to(&sessions_out, Produced::new());
    let state = tempfile::tempdir().unwrap();
    let config = StreamsConfig::from_pairs([
        ("application_id", app.as_str()),
        ("bootstrap_servers", &common::bootstrap()),
        ("state_dir", &state.path().display().to_string()),
        ("processing_guarantee", "exactly_once_v2"),
    ])
    .unwrap();
    let mut streams = KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    assert!(matches!(
        streams.window_store::<String, i64>("sessions"),
        Err(QueryError::WrongKind { .. })
    ));
    let windows = streams.window_store::<String, i64>("per-hour").unwrap();
    let sessions = streams.session_store::<String, i64>("sessions").unwrap();
    streams.start().unwrap();

    let record = |key: &str| (Some(key.as_bytes().to_vec()), b"v".to_vec());
    // "a": two records together, then one more after the session gap.
    common::produce_batch(&windows_in, &[record("a"), record("a"), record("b")]);
    common::produce_batch(&sessions_in, &[record("a"), record("a"), record("b")]);
    std::thread::sleep(Duration::from_millis(1_500));
    common::produce_batch(&windows_in, &[record("a")]);
    common::produce_batch(&sessions_in, &[record("a")]);

    let deadline = Instant::now() + Duration::from_secs(120);
    let (a_windows, a_sessions) = loop {
        let a_windows = windows.fetch(&"a".to_string(), 0, i64::MAX);
        let a_sessions = sessions.fetch(&"a".to_string());
        let total: i64 = a_windows
            .as_ref()
            .map_or(0, |w| w.iter().map(|(_, c)| c).sum());
        let counts: Vec<i64> = a_sessions
            .as_ref()
            .map(|s| s.iter().map(|(_, _, c)| *c).collect())
            .unwrap_or_default();
        if total == 3 && counts == [2, 1] {
            break (a_windows.unwrap(), a_sessions.unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "windows of a: {a_windows:?}, sessions of a: {a_sessions:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for (start, _) in &a_windows {
        assert_eq!(start % 3_600_000, 0, "hour windows start on the hour");
    }
    let (first, second) = (a_sessions[0], a_sessions[1]);
    assert!(first.1 < second.0, "two sessions, apart: {a_sessions:?}");
    assert!(
        second.0 - first.1 >= 500,
        "split by the 500 ms gap: {a_sessions:?}"
    );
    let all = windows.fetch_all(0, i64::MAX).unwrap();
    let per_key: BTreeMap<String, i64> = all.iter().fold(BTreeMap::new(), |mut m, (k, _, c)| {
        *m.entry(k.clone()).or_default() += c;
        m
    });
    assert_eq!(per_key, BTreeMap::from([("a".into(), 3), ("b".into(), 1)]));
    assert!(
        windows.fetch(&"a".to_string(), 0, 0).unwrap().is_empty(),
        "no window starts at 0"
    );
    assert!(streams.close(Duration::from_secs(30)));
}
