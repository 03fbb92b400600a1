//! Interactive queries while the owner of a key is SIGKILLed, on the real
//! broker: three `weir run` instances of word count under exactly-once
//! with one standby replica and input flowing. Two clients ask a surviving
//! instance for one word in a loop, one strict and one allowing stale
//! answers (`?stale=1`). Every answer either is 503 or holds a count the
//! output topic (read `read_committed`) held at some point; the strict
//! client's answers resume from the new owner (the gap is printed); while
//! the owner is gone, the stale client is answered from the standby copy
//! with its lag. Counts are exact at the end.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::counting::{Fixture, serial, tail, wait_for_output, word_count_truth};
use common::weir_app::{WeirApp, http_get_at};
use serde_json::Value;
use weir::topologies::word_count;

const WORD: &str = "kafka";

/// One answer the looping client got.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    status: u16,
    value: Option<i64>,
    served_by: String,
    standby: bool,
    lag: Option<i64>,
}

fn ask_in_a_loop(
    addr: std::net::SocketAddr,
    path: String,
    running: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Seen>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        while running.load(Ordering::SeqCst) {
            if let Some((status, body)) = http_get_at(addr, &path) {
                let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                seen.push(Seen {
                    at: Instant::now(),
                    status,
                    value: answer["value"].as_i64(),
                    served_by: answer["served_by"].as_str().unwrap_or_default().to_string(),
                    standby: answer["standby"].as_bool().unwrap_or(false),
                    lag: answer["lag_records"].as_i64(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        seen
    })
}

#[test]
fn queries_through_a_sigkill_of_the_owner() {
    let _serial = serial();
    let mut f = Fixture::new("query-failover", &word_count::WORD_COUNT);
    f.extra.push("num_standby_replicas=1".into());
    let f = Arc::new(f);
    let mut apps: Vec<WeirApp> = (0..3).map(|i| f.start(i, "exactly_once_v2")).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !apps.iter().all(WeirApp::is_ready) {
        assert!(Instant::now() < deadline, "{}", tail(&apps[0].log_text()));
        std::thread::sleep(Duration::from_millis(200));
    }

    // Input flows: 20 sentences every 100 ms.
    let producing = Arc::new(AtomicBool::new(true));
    let written = Arc::new(AtomicU64::new(0));
    let producer = {
        let (f, producing, written) = (f.clone(), producing.clone(), written.clone());
        std::thread::spawn(move || {
            let mut next = 0;
            while producing.load(Ordering::SeqCst) {
                f.produce(next, 20);
                next += 20;
                written.store(next, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // The group settled: the same description (three instances, eight
    // tasks, standbys placed) for three reads in a row.
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut last, mut same) = (Value::Null, 0);
    while same < 3 {
        let (status, body) = apps[0].http_get("/instances").unwrap_or_default();
        let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let instances = answer["instances"].clone();
        let tasks: usize = instances
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|i| i["tasks"].as_array().map_or(0, Vec::len))
                    .sum()
            })
            .unwrap_or(0);
        let settled = status == 200 && tasks == 8 && apps.iter().all(WeirApp::is_ready);
        same = if settled && instances == last {
            same + 1
        } else {
            0
        };
        last = instances;
        assert!(
            Instant::now() < deadline,
            "the group did not settle: {last}"
        );
        std::thread::sleep(Duration::from_millis(700));
    }
    // Standbys are placed within a few seconds of the group settling.
    std::thread::sleep(Duration::from_secs(4));

    // The word's owner and a client instance that is not it.
    let path = format!("/stores/counts/keys/{WORD}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let owner_endpoint = loop {
        if let Some((200, body)) = apps[0].http_get(&path) {
            let answer: Value = serde_json::from_str(&body).unwrap();
            break answer["served_by"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no answer for {WORD}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let addrs: Vec<String> = apps
        .iter()
        .map(|a| a.http_addr().unwrap().to_string())
        .collect();
    let owner = addrs.iter().position(|a| *a == owner_endpoint).unwrap();
    let client = (owner + 1) % 3;
    let client_addr = apps[client].http_addr().unwrap();

    let asking = Arc::new(AtomicBool::new(true));
    let strict = ask_in_a_loop(client_addr, path.clone(), asking.clone());
    let stale = ask_in_a_loop(client_addr, format!("{path}?stale=1"), asking.clone());
    std::thread::sleep(Duration::from_secs(3));
    let (_, body) = http_get_at(client_addr, &path).unwrap();
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer["served_by"].as_str(),
        Some(owner_endpoint.as_str()),
        "the owner did not change before the kill"
    );
    let killed_at = Instant::now();
    apps[owner].kill();
    // Until a new owner answers, and a little more.
    std::thread::sleep(Duration::from_secs(30));
    asking.store(false, Ordering::SeqCst);
    let strict = strict.join().unwrap();
    let stale = stale.join().unwrap();
    producing.store(false, Ordering::SeqCst);
    producer.join().unwrap();

    let n = written.load(Ordering::SeqCst);
    let truth = word_count_truth(n);
    let mut survivors: Vec<&mut WeirApp> = apps
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| *i != owner)
        .map(|(_, a)| a)
        .collect();
    let counts = wait_for_output(&f.output, Duration::from_secs(300), &mut survivors, |c| {
        *c == truth
    });
    assert_eq!(counts, truth, "exact after the SIGKILL");

    // Every count the output topic held for the word.
    let held: BTreeSet<i64> = common::read_to_end(&f.output)
        .into_iter()
        .filter(|r| r.key.as_deref() == Some(WORD.as_bytes()))
        .filter_map(|r| Some(i64::from_be_bytes(r.value?.as_slice().try_into().ok()?)))
        .collect();
    for (name, seen) in [("strict", &strict), ("stale", &stale)] {
        for s in seen.iter().filter(|s| s.status == 200) {
            let value = s.value.expect("a 200 carries a value");
            assert!(
                held.contains(&value),
                "{name}: answer {value} from {} (standby {}) was never in the output topic",
                s.served_by,
                s.standby
            );
        }
        assert!(
            seen.iter().all(|s| s.status == 200 || s.status == 503),
            "{name}: only 200 or 503: {:?}",
            seen.iter().map(|s| s.status).collect::<BTreeSet<_>>()
        );
    }

    let after = |s: &&Seen| s.at > killed_at;
    let strict_ok: Vec<&Seen> = strict
        .iter()
        .filter(after)
        .filter(|s| s.status == 200)
        .collect();
    let resumed = strict_ok
        .iter()
        .find(|s| s.served_by != owner_endpoint)
        .unwrap_or_else(|| panic!("strict answers resumed from a new owner: {strict:?}"));
    let last_before = strict
        .iter()
        .filter(|s| s.at <= killed_at && s.status == 200)
        .map(|s| s.at)
        .max()
        .expect("answers before the kill");
    let gap = resumed.at - last_before;
    let stale_standby: Vec<&Seen> = stale
        .iter()
        .filter(after)
        .filter(|s| s.status == 200 && s.standby && s.at < resumed.at)
        .collect();
    let strict_503 = strict
        .iter()
        .filter(after)
        .filter(|s| s.status == 503)
        .count();
    println!(
        "owner {owner_endpoint} SIGKILLed; strict client: {strict_503} answers 503, answers resumed from {} after a gap of {:.1} s; \
         stale client: {} answers from a standby copy while the owner was gone (lags {:?})",
        resumed.served_by,
        gap.as_secs_f64(),
        stale_standby.len(),
        stale_standby
            .iter()
            .filter_map(|s| s.lag)
            .collect::<BTreeSet<_>>()
    );
    assert!(
        !stale_standby.is_empty(),
        "the stale client was answered from the standby while the owner was gone: {:?}",
        stale.iter().filter(after).take(20).collect::<Vec<_>>()
    );
    assert!(
        stale_standby.iter().all(|s| s.lag.is_some()),
        "standby answers report their lag"
    );
    for (i, app) in apps.iter_mut().enumerate() {
        if i != owner {
            assert_eq!(app.stop(), Some(0));
        }
    }
}
