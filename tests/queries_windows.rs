//! Window store queries on the real broker: two `weir run` instances of
//! the shipped `page-views` under exactly-once. Once the input is
//! processed, each page's windows asked from one instance over HTTP
//! (`/stores/page-views-per-minute/keys/{page}/windows`, forwarded to the
//! page's owner when needed) hold every emitted window (the store keeps an
//! hour, the input spans six minutes) with exactly the emitted count, and
//! the windows not emitted yet only after the last emitted one; a bad range
//! is a 400 with a reason.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::counting::{serial, tail};
use common::weir_app::{WeirApp, get_json, percent_encode};
use weir::topologies::page_views::{self, PAGES, PageView, STORE, WINDOW_MS, sample_view};

const GRACE_MS: i64 = 10_000;
const VIEWS: u64 = 3_600;

/// Emitted results (read_committed): (page, window start) → count.
fn results(topic: &str) -> BTreeMap<(String, i64), i64> {
    common::page_view_results(topic)
        .into_iter()
        .map(|(page, start, count)| ((page, start), count))
        .collect()
}

#[test]
fn window_queries_match_the_emitted_windows() {
    let _serial = serial();
    let app_id = common::unique_topic("query-windows");
    let (input, output) = (format!("{app_id}-views"), format!("{app_id}-per-minute"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 4), (&output, 4)]));
    let dir = tempfile::tempdir().unwrap();
    let start = |i: usize| {
        let settings = vec![
            format!("application_id={app_id}"),
            "processing_guarantee=exactly_once_v2".to_string(),
            "commit_interval_ms=200".to_string(),
            format!("topology.input_topic={input}"),
            format!("topology.output_topic={output}"),
            format!("topology.late_topic={app_id}-late"),
            format!("topology.grace_ms={GRACE_MS}"),
        ];
        let state = dir.path().join(format!("instance-{i}"));
        let log = dir.path().join(format!("instance-{i}.log"));
        WeirApp::start("page-views", &state, &log, &settings)
    };
    let mut apps = vec![start(0), start(1)];
    // Event times about 15 minutes before now (changelog retention goes
    // by event time).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = now - now.rem_euclid(WINDOW_MS) - 15 * WINDOW_MS;
    let records: Vec<(Option<Vec<u8>>, Vec<u8>)> = (0..VIEWS)
        .map(|i| {
            let (page, ts) = sample_view(i);
            let view = PageView {
                user: "u1".into(),
                ts: ts - page_views::SAMPLE_START_MS + base,
            };
            (
                Some(page.as_bytes().to_vec()),
                serde_json::to_vec(&view).unwrap(),
            )
        })
        .collect();
    common::produce_batch(&input, &records);

    // Processed: both ready and the results stable for 3 s.
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut emitted, mut stable_since) = (BTreeMap::new(), Instant::now());
    loop {
        for app in &mut apps {
            assert!(app.is_running(), "{}", tail(&app.log_text()));
        }
        let now = results(&output);
        if now != emitted {
            emitted = now;
            stable_since = Instant::now();
        }
        if !emitted.is_empty()
            && stable_since.elapsed() > Duration::from_secs(3)
            && apps.iter().all(WeirApp::is_ready)
        {
            break;
        }
        assert!(Instant::now() < deadline, "no stable results");
        std::thread::sleep(Duration::from_millis(500));
    }

    let mut matched = 0;
    let mut open = 0;
    for page in PAGES {
        let (status, answer) = get_json(
            apps[0].http_addr().unwrap(),
            &format!("/stores/{STORE}/keys/{}/windows", percent_encode(page)),
        );
        assert_eq!(status, 200, "{page}: {answer}");
        let windows = answer["windows"].as_array().unwrap();
        assert!(
            !windows.is_empty(),
            "{page}: windows are retained: {answer}"
        );
        let earliest = windows[0]["start"].as_i64().unwrap();
        for w in windows {
            let start = w["start"].as_i64().unwrap();
            let count = w["value"].as_i64().unwrap();
            match emitted.get(&(page.to_string(), start)) {
                Some(&emitted) => {
                    assert_eq!(count, emitted, "{page} at {start}");
                    matched += 1;
                }
                None => open += 1,
            }
        }
        // Every emitted window is there; open ones only come after them.
        let page_emitted: Vec<i64> = emitted
            .keys()
            .filter(|(p, _)| p == page)
            .map(|&(_, start)| start)
            .collect();
        for start in &page_emitted {
            assert!(
                windows.iter().any(|w| w["start"].as_i64() == Some(*start)),
                "{page}: emitted window {start} is in the store: {answer}"
            );
        }
        let last_emitted = page_emitted.last().copied().unwrap_or(i64::MIN);
        for w in windows {
            let start = w["start"].as_i64().unwrap();
            assert!(
                page_emitted.contains(&start) || start > last_emitted,
                "{page}: window {start} is neither emitted nor after the last emitted one: {answer}"
            );
        }
        // One window by its bounds.
        let (status, one) = get_json(
            apps[1].http_addr().unwrap(),
            &format!(
                "/stores/{STORE}/keys/{}/windows?from={earliest}&to={earliest}",
                percent_encode(page)
            ),
        );
        assert_eq!(status, 200, "{one}");
        assert_eq!(one["windows"].as_array().unwrap().len(), 1, "{one}");
    }
    println!(
        "{} pages: {matched} queried windows equal their emitted counts, {open} still open (not emitted yet)",
        PAGES.len()
    );
    assert_eq!(
        matched,
        emitted.len(),
        "every emitted window is in the store"
    );
    assert!(
        emitted.len() >= 4 * PAGES.len(),
        "six minutes of views close at least four windows per page: {emitted:?}"
    );
    for (path, status, reason) in [
        (
            format!("/stores/{STORE}/keys/x/windows?from=5&to=1"),
            400,
            "is after",
        ),
        (
            format!("/stores/{STORE}/keys/x/windows?from=soon"),
            400,
            "not a time",
        ),
        (format!("/stores/{STORE}/keys/x"), 400, "is a window store"),
        (format!("/stores/{STORE}/range"), 400, "is a window store"),
    ] {
        let (got, answer) = get_json(apps[0].http_addr().unwrap(), &path);
        assert_eq!(got, status, "{path}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains(reason),
            "{path}: {answer}"
        );
    }
    for app in &mut apps {
        assert_eq!(app.stop(), Some(0));
    }
}
