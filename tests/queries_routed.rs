//! Interactive queries routed between instances, on the real broker:
//! three `weir run` instances of word count under exactly-once. Once the
//! input is processed, asking *each* instance for *every* word over HTTP
//! returns the word's last count in the output topic (`read_committed`),
//! from the instance that runs the word's task (forwarded once when that
//! is another); a range from any instance returns the whole table, each
//! word once; `/instances` lists the three with their endpoints and tasks;
//! `weir query` finds an instance through the group and prints its answer.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::counting::{Fixture, serial, tail, wait_for_output, word_count_truth};
use common::weir_app::{WeirApp, get_json, percent_encode};
use serde_json::Value;
use weir::topologies::word_count;

const SENTENCES: u64 = 2_000;

/// As [`get`], honouring `503 Retry-After` (a task moving) up to 10 s;
/// counts the retries in `retries`.
fn get_retrying(app: &WeirApp, path: &str, retries: &mut u32) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = get_json(app.http_addr().unwrap(), path);
        if status != 503 || Instant::now() > deadline {
            return (status, answer);
        }
        *retries += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn every_instance_answers_for_every_word() {
    let _serial = serial();
    let f = Fixture::new("query-routed", &word_count::WORD_COUNT);
    let mut apps: Vec<WeirApp> = (0..3).map(|i| f.start(i, "exactly_once_v2")).collect();
    f.produce(0, SENTENCES);
    let truth = word_count_truth(SENTENCES);
    let mut refs: Vec<&mut WeirApp> = apps.iter_mut().collect();
    let topic = wait_for_output(&f.output, Duration::from_secs(240), &mut refs, |c| {
        *c == truth
    });

    // Wait until the group settled: three instances, eight tasks, all
    // instances ready, and the same description three times in a row.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last: Option<Value> = None;
    let mut same = 0;
    let instances = loop {
        let ready = apps.iter().all(WeirApp::is_ready);
        let (status, answer) = get_json(apps[0].http_addr().unwrap(), "/instances");
        let instances = answer["instances"].as_array().cloned().unwrap_or_default();
        let tasks: BTreeSet<String> = instances
            .iter()
            .flat_map(|i| i["tasks"].as_array().cloned().unwrap_or_default())
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        let settled = ready && status == 200 && instances.len() == 3 && tasks.len() == 8;
        same = if settled && last.as_ref() == Some(&answer["instances"]) {
            same + 1
        } else {
            0
        };
        last = Some(answer["instances"].clone());
        if same >= 2 {
            break instances;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle: {answer}; log:\n{}",
            tail(&apps[0].log_text())
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let endpoints: BTreeSet<String> = instances
        .iter()
        .map(|i| i["endpoint"].as_str().expect("an endpoint").to_string())
        .collect();
    let own: Vec<String> = apps
        .iter()
        .map(|a| a.http_addr().unwrap().to_string())
        .collect();
    assert_eq!(
        endpoints,
        own.iter().cloned().collect(),
        "the instances advertise their HTTP addresses"
    );

    let mut forwarded = 0;
    let mut retries = 0;
    for (i, app) in apps.iter().enumerate() {
        for (word, count) in &topic {
            let (status, answer) = get_retrying(
                app,
                &format!("/stores/counts/keys/{}", percent_encode(word)),
                &mut retries,
            );
            assert_eq!(status, 200, "instance {i}, {word}: {answer}");
            assert_eq!(
                answer["value"],
                serde_json::json!(count),
                "instance {i}, {word}"
            );
            let served_by = answer["served_by"].as_str().unwrap();
            assert!(endpoints.contains(served_by), "{answer}");
            if served_by != own[i] {
                forwarded += 1;
            }
        }
        let (status, range) = get_retrying(app, "/stores/counts/range", &mut retries);
        assert_eq!(status, 200, "instance {i}: {range}");
        let entries = range["entries"].as_array().unwrap();
        let table: BTreeMap<String, i64> = entries
            .iter()
            .map(|e| {
                (
                    e["key"].as_str().unwrap().to_string(),
                    e["value"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(table, topic, "instance {i}: the range is the table");
        assert_eq!(entries.len(), topic.len(), "instance {i}: each word once");
        assert_eq!(range["served_by"].as_array().unwrap().len(), 3);
    }
    println!(
        "{} words asked at each of 3 instances: {forwarded} of {} answers forwarded to the owner; {retries} retries after a 503",
        topic.len(),
        3 * topic.len()
    );
    assert!(forwarded > 0, "some words' tasks run on other instances");

    // `weir query` finds an instance through the group.
    let query = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("query")
            .args(args)
            .args(["--application-id", &f.app_id])
            .args(["--bootstrap-servers", &common::bootstrap()])
            .output()
            .expect("running weir query");
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), answer)
    };
    let (word, count) = topic.iter().next().unwrap();
    let (code, answer) = query(&["counts", word]);
    assert_eq!(code, Some(0), "{answer}");
    assert_eq!(answer["value"], serde_json::json!(count));
    let (code, answer) = query(&["counts"]);
    assert_eq!(code, Some(0));
    assert_eq!(answer["entries"].as_array().unwrap().len(), topic.len());
    let (code, answer) = query(&["counts", "no such word/%"]);
    assert_eq!(code, Some(1), "a missing key fails: {answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("\"no such word/%\""),
        "{answer}"
    );
    for app in &mut apps {
        assert_eq!(app.stop(), Some(0));
    }
}
