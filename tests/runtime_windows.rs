//! Windows on the real broker, exactly-once: stream time and late records
//! survive a task move; the shipped `page-views` topology (emit-final) emits
//! exactly one result per page and minute through a SIGKILL and a rebalance
//! that happen while windows are open; a hopping-window count over 1,000,000
//! records matches a reference computed here.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::weir_app::WeirApp;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir::topologies::page_views::{self, PageView, WINDOW_MS, sample_is_late, sample_view};
use weir::windows::{LATE_HEADER_REASON, LATE_HEADER_STREAM_TIME, LATE_REASON_WINDOW_CLOSED};

/// Each test runs `weir` instances or a busy in-process app; on a small
/// machine they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const GRACE_MS: i64 = 10_000;

/// Event times here are shifted to a whole minute about 15 minutes before
/// now: window changelogs are `compact,delete` with retention = window
/// retention + 1 day *by record (event) time*, as in Kafka Streams, so the
/// broker would delete the changelog of the sample's fixed 2023 windows
/// within a retention check and a restore would miss them.
fn event_time_base() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now - now.rem_euclid(WINDOW_MS) - 15 * WINDOW_MS
}

/// Sample view `i`'s page and event time, shifted to start at `base`.
fn shifted_view(base: i64, i: u64) -> (&'static str, i64) {
    let (page, ts) = sample_view(i);
    (page, ts - page_views::SAMPLE_START_MS + base)
}

/// `(offset, stream time)` committed by `group` for each partition of
/// `topic`; an error while the group coordinator is still loading, say.
fn committed(
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<(i64, Option<i64>)>, rdkafka::error::KafkaError> {
    let consumer: BaseConsumer = common::base_config()
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .expect("creating the offsets reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
    Ok((0..partitions)
        .map(|p| {
            let e = got.find_partition(topic, p).expect("partition listed");
            let offset = match e.offset() {
                Offset::Offset(n) => n,
                _ => 0,
            };
            (offset, weir::runtime::stream_time::decode(e.metadata()))
        })
        .collect())
}

/// Log end offsets of `topic`'s partitions.
fn end_offsets(topic: &str, partitions: i32) -> Vec<i64> {
    let consumer: BaseConsumer = common::base_config().create().expect("watermark reader");
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("reading watermarks")
                .1
        })
        .collect()
}

/// Polls `check` every 200 ms until it returns `Some`, checking that every
/// app still runs; panics after `timeout`.
fn wait_until<T>(
    timeout: Duration,
    what: &str,
    apps: &mut [&mut WeirApp],
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        for app in apps.iter_mut() {
            assert!(
                app.is_running(),
                "an instance exited while waiting until {what}; log {}:\n{}",
                app.log.display(),
                tail(&app.log_text())
            );
        }
        assert!(Instant::now() < deadline, "not {what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A `page-views` application with its own topics and state directories.
struct PageViews {
    app_id: String,
    input: String,
    output: String,
    late: String,
    partitions: i32,
    guarantee: &'static str,
    dir: tempfile::TempDir,
}

impl PageViews {
    fn new(name: &str, partitions: i32, guarantee: &'static str) -> PageViews {
        let app_id = common::unique_topic(name);
        let input = format!("{app_id}-views");
        let output = format!("{app_id}-per-minute");
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(common::create_topics(&[
            (&input, partitions),
            (&output, partitions),
        ]));
        PageViews {
            late: format!("{app_id}-late"),
            app_id,
            input,
            output,
            partitions,
            guarantee,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn start(&self, instance: usize) -> WeirApp {
        let settings = vec![
            format!("application_id={}", self.app_id),
            format!("processing_guarantee={}", self.guarantee),
            "commit_interval_ms=200".to_string(),
            format!("topology.input_topic={}", self.input),
            format!("topology.output_topic={}", self.output),
            format!("topology.late_topic={}", self.late),
            format!("topology.grace_ms={GRACE_MS}"),
        ];
        let state = self.dir.path().join(format!("instance-{instance}"));
        let log = self.dir.path().join(format!("instance-{instance}.log"));
        WeirApp::start("page-views", &state, &log, &settings)
    }

    /// Writes sample views `start..end`, their event times shifted to `base`.
    fn produce_samples(&self, base: i64, start: u64, end: u64) {
        let views: Vec<_> = (start..end).map(|i| shifted_view(base, i)).collect();
        self.produce_views(&views);
    }

    fn produce_views(&self, views: &[(&str, i64)]) {
        let records: Vec<(Option<Vec<u8>>, Vec<u8>)> = views
            .iter()
            .map(|(page, ts)| {
                let v = PageView {
                    user: "u1".into(),
                    ts: *ts,
                };
                (
                    Some(page.as_bytes().to_vec()),
                    serde_json::to_vec(&v).unwrap(),
                )
            })
            .collect();
        common::produce_batch(&self.input, &records);
    }

    fn committed(&self) -> Vec<(i64, Option<i64>)> {
        committed(&self.app_id, &self.input, self.partitions).expect("reading committed offsets")
    }

    /// Waits until the group committed every input record written so far.
    fn wait_all_committed(&self, apps: &mut [&mut WeirApp], what: &str) {
        let ends = end_offsets(&self.input, self.partitions);
        wait_until(Duration::from_secs(120), what, apps, || {
            let c = committed(&self.app_id, &self.input, self.partitions).ok()?;
            c.iter().zip(&ends).all(|((o, _), e)| o == e).then_some(())
        });
    }
}

#[test]
fn stream_time_and_lateness_survive_a_task_move() {
    stream_time_and_lateness_survive_a_task_move_under("exactly_once_v2");
}

#[test]
fn stream_time_and_lateness_survive_a_task_move_at_least_once() {
    stream_time_and_lateness_survive_a_task_move_under("at_least_once");
}

fn stream_time_and_lateness_survive_a_task_move_under(guarantee: &'static str) {
    let _serial = serial();
    let f = PageViews::new("pv-time", 1, guarantee);
    let t0 = event_time_base();
    f.produce_views(&[("/a", t0 + 150_000)]);
    let mut a = f.start(0);
    f.wait_all_committed(&mut [&mut a], "the first view is committed");
    assert_eq!(
        f.committed()[0].1,
        Some(t0 + 150_000),
        "the committed offset carries the stream time"
    );
    assert_eq!(a.stop(), Some(0));
    let late_partitions = end_offsets(&f.late, 1);
    assert_eq!(
        late_partitions,
        vec![0],
        "the runtime created the late topic"
    );

    // A fresh state directory: the task moves; its store comes back from
    // the changelog and its stream time from the committed offset.
    let mut b = f.start(1);
    // [t0, t0+60s) closed at stream time t0+70s, before the move, without
    // ever holding a view: only the restored stream time knows.
    f.produce_views(&[("/a", t0 + 30_000), ("/a", t0 + 250_000)]);
    f.wait_all_committed(&mut [&mut b], "the views after the move are committed");
    assert_eq!(f.committed()[0].1, Some(t0 + 250_000));
    assert_eq!(
        common::page_view_results(&f.output),
        vec![("/a".to_string(), t0 + 120_000, 1)],
        "only the window open before the move has a result; log of the second instance:\n{}",
        tail(&b.log_text())
    );
    let late = common::read_to_end(&f.late);
    assert_eq!(late.len(), 1, "the late view, once: {late:?}");
    assert_eq!(
        late[0].header(LATE_HEADER_REASON).as_deref(),
        Some(LATE_REASON_WINDOW_CLOSED)
    );
    assert_eq!(
        late[0].header(LATE_HEADER_STREAM_TIME),
        Some((t0 + 150_000).to_string()),
        "dropped at the stream time restored from the commit"
    );
    assert_eq!(b.stop(), Some(0));
}

/// `(page, window start) -> count` of the non-late samples `0..n` shifted to `base`.
fn reference(base: i64, n: u64) -> BTreeMap<(String, i64), i64> {
    let mut counts = BTreeMap::new();
    for i in (0..n).filter(|&i| !sample_is_late(i)) {
        let (page, ts) = shifted_view(base, i);
        let start = ts - ts.rem_euclid(WINDOW_MS);
        *counts.entry((page.to_string(), start)).or_insert(0) += 1;
    }
    counts
}

#[test]
fn emit_final_once_per_window_through_sigkill_and_rebalance() {
    let _serial = serial();
    let f = PageViews::new("pv-crash", 2, "exactly_once_v2");
    let started = Instant::now();
    let base = event_time_base();
    // 600 views per minute of event time; window w holds samples 600w..600w+600.
    f.produce_samples(base, 0, 2_700);
    let mut a = f.start(0);
    f.wait_all_committed(&mut [&mut a], "the first 2,700 views are committed");
    // Window [240 s, 300 s) got its first views; it closes at 310 s (sample
    // ~3,100). More views of it trickle in, and SIGKILL lands among them.
    let committed_at_kill = std::thread::scope(|s| {
        s.spawn(|| {
            // Five batches of ten, each a new producer (about 0.4 s apiece).
            for i in (2_700..2_750).step_by(10) {
                f.produce_samples(base, i, i + 10);
            }
        });
        std::thread::sleep(Duration::from_millis(900));
        a.kill();
        f.committed().iter().map(|(o, _)| o).sum::<i64>()
    });
    let before_restart = common::page_view_results(&f.output);
    let mut a = f.start(0);
    f.produce_samples(base, 2_750, 3_600);
    f.wait_all_committed(&mut [&mut a], "the restarted instance caught up");
    // Window [300 s, 360 s) is open (closes at 370 s); a second instance
    // joins and takes one of the two tasks.
    let before_join = common::page_view_results(&f.output);
    let mut b = f.start(1);
    wait_until(
        Duration::from_secs(60),
        "the second instance owns a task",
        &mut [&mut a],
        || {
            let log = std::fs::read_to_string(&b.log).unwrap_or_default();
            log.contains("partitions=1").then_some(())
        },
    );
    f.produce_samples(base, 3_600, 7_200);
    f.wait_all_committed(&mut [&mut a, &mut b], "all 7,200 views are committed");

    let out = common::page_view_results(&f.output);
    let reference = reference(base, 7_200);
    let mut seen = BTreeSet::new();
    for (page, start, count) in &out {
        assert!(
            seen.insert((page.clone(), *start)),
            "({page}, {start}) has more than one result: {out:?}"
        );
        assert_eq!(
            Some(count),
            reference.get(&(page.clone(), *start)),
            "count of ({page}, {start})"
        );
    }
    // Every window closed in both partitions (its end + grace is well
    // behind the last views) has its result.
    let last = base + 7_199 * page_views::SAMPLE_STEP_MS;
    let closed: BTreeSet<(String, i64)> = reference
        .keys()
        .filter(|(_, start)| start + WINDOW_MS + GRACE_MS + 20_000 <= last)
        .cloned()
        .collect();
    let missing: Vec<_> = closed.difference(&seen).collect();
    assert!(missing.is_empty(), "no result for {missing:?}");
    // The windows open across the kill and across the rebalance had no
    // result before them, and have one (per page) now.
    for (start, before) in [(240_000, &before_restart), (300_000, &before_join)] {
        let window = base + start;
        assert!(before.iter().all(|(_, s, _)| *s != window));
        let pages = out.iter().filter(|(_, s, _)| *s == window).count();
        assert_eq!(
            pages,
            page_views::PAGES.len(),
            "results of window +{start} ms"
        );
    }
    let late = common::read_to_end(&f.late);
    let late_samples = (0..7_200).filter(|&i| sample_is_late(i)).count();
    assert_eq!(late.len(), late_samples, "each late view once");
    println!(
        "page-views, 2 partitions, SIGKILL + rebalance: {} results ({} before the restart; \
         {committed_at_kill} of 2,750 views committed at the kill), \
         {} closed windows checked, {} late, in {:?}",
        out.len(),
        before_restart.len(),
        closed.len(),
        late.len(),
        started.elapsed()
    );
    assert_eq!(a.stop(), Some(0));
    assert_eq!(b.stop(), Some(0));
}

#[test]
fn a_missing_late_topic_is_planned_like_the_sources_and_an_existing_one_kept() {
    let pv = weir::topologies::find("page-views").unwrap();
    let topology = (pv.build)(&pv.params(&Default::default()).unwrap()).unwrap();
    let plan = |existing: &[(&str, i32)]| {
        let existing = existing.iter().map(|(t, n)| (t.to_string(), *n)).collect();
        weir::runtime::topics::plan(&topology, "app", &existing).unwrap()
    };
    let layout = plan(&[("page-views", 6)]);
    assert_eq!(layout.late_topics, ["page-views-late"]);
    assert_eq!(layout.partitions["page-views-late"], 6);
    let layout = plan(&[("page-views", 6), ("page-views-late", 1)]);
    assert_eq!(layout.partitions["page-views-late"], 1);
}
