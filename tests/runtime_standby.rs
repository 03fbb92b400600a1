//! Standby replicas on the real broker: with `num_standby_replicas=1`, the
//! instance that takes over a killed instance's tasks restores only the tail
//! of their changelogs; without standbys it reads them in full. Counts stay
//! exact under exactly-once either way.

mod common;

use std::time::Duration;

use common::counting::{Fixture, wait_for_output, word_count_truth as true_counts};
use weir::topologies::word_count;

/// `(restored, changelog_records)` of the restores in `log_lines`.
fn restores(log_lines: &str) -> Vec<(u64, u64)> {
    log_lines
        .lines()
        .filter(|l| l.contains("restored task"))
        .map(|l| {
            let field = |name: &str| -> u64 {
                let at = l.find(&format!("{name}=")).expect("field present") + name.len() + 1;
                l[at..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            (field("restored"), field("changelog_records"))
        })
        .collect()
}

/// Runs two instances, kills the first after the counts converged, and
/// returns the survivor's restores of the tasks it took over, and its log.
fn takeover(name: &str, standbys: usize) -> (Vec<(u64, u64)>, String) {
    let mut f = Fixture::new(name, &word_count::WORD_COUNT);
    f.extra.push(format!("num_standby_replicas={standbys}"));
    let n = 30_000;
    // The first instance counts everything alone, so the second never owned
    // the tasks it takes over later: without standbys it has no local copy.
    let mut a = f.start(0, "exactly_once_v2");
    f.produce(0, n);
    let truth = true_counts(n);
    wait_for_output(&f.output, Duration::from_secs(180), &mut [&mut a], |c| {
        *c == truth
    });
    let mut b = f.start(1, "exactly_once_v2");
    // The group rebalances; standbys re-read the group every 3 s and
    // checkpoint every 5 s.
    std::thread::sleep(Duration::from_secs(15));
    assert!(a.is_running() && b.is_running());
    let before = b.log_text().len();
    a.kill();
    let m = n + 3_000;
    f.produce(n, m - n);
    let truth = true_counts(m);
    let counts = wait_for_output(&f.output, Duration::from_secs(180), &mut [&mut b], |c| {
        *c == truth
    });
    assert_eq!(counts, truth, "exact after the takeover");
    let log = b.log_text();
    assert_eq!(b.stop(), Some(0));
    let after = log[before..].to_string();
    (restores(&after), log)
}

#[test]
fn standby_replicas_make_a_takeover_restore_only_the_tail() {
    let (cold, _) = takeover("standby-0", 0);
    let (warm, warm_log) = takeover("standby-1", 1);
    println!("takeover without standbys (restored, changelog records): {cold:?}");
    println!("takeover with 1 standby   (restored, changelog records): {warm:?}");
    assert!(
        warm_log.contains("opened standby task"),
        "the survivor kept standby tasks"
    );
    assert!(
        warm_log.contains("taking over the standby copy"),
        "the takeover used them"
    );
    let cold_read: u64 = cold.iter().map(|r| r.0).sum();
    let warm_read: u64 = warm.iter().map(|r| r.0).sum();
    let warm_size: u64 = warm.iter().map(|r| r.1).sum();
    println!(
        "changelog records read at takeover: {cold_read} without standbys, {warm_read} with (of {warm_size})"
    );
    assert!(cold_read > 0, "a cold takeover reads the changelogs");
    assert!(
        warm_read * 10 < cold_read,
        "a warm takeover reads far less: {warm_read} vs {cold_read}"
    );
}
