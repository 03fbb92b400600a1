//! Standby replicas on the real broker: with `num_standby_replicas=1`, the
//! instance that takes over a killed instance's tasks restores only the tail
//! of their changelogs; without standbys it reads them in full. Counts stay
//! exact under exactly-once either way. The instances are observed through
//! their HTTP servers (`/health/ready`, `/metrics`).

mod common;

use std::time::{Duration, Instant};

use common::counting::{Fixture, wait_for_output, word_count_truth as true_counts};
use common::weir_app::WeirApp;
use weir::topologies::word_count;

/// What the surviving instance did, from its metrics.
struct Takeover {
    /// Changelog records it restored for the tasks it took over.
    restored: u64,
    /// Standby tasks it kept before the takeover.
    standby_tasks: u64,
    /// Standby copies its stream thread took over.
    takeovers: u64,
}

fn metric(app: &WeirApp, name: &str) -> u64 {
    app.metric(name).unwrap_or_else(|| {
        panic!(
            "{name}: no answer from the HTTP server of {}",
            app.log.display()
        )
    }) as u64
}

/// Waits until `done` holds, checking every 500 ms, for at most `timeout`.
fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "not {what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Runs two instances, kills the first after the counts converged, and
/// returns what the survivor did when it took over the first's tasks.
fn takeover(name: &str, standbys: usize) -> Takeover {
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
    wait_until(
        "both instances ready after the rebalance",
        Duration::from_secs(120),
        || {
            assert!(a.is_running() && b.is_running(), "an instance exited");
            b.is_ready() && a.is_ready()
        },
    );
    if standbys > 0 {
        // Standbys re-read the group every 3 s, then apply the changelogs
        // of the first instance's tasks: wait until that stops moving.
        let mut seen = Vec::new();
        wait_until("standby tasks caught up", Duration::from_secs(120), || {
            let applied = metric(&b, "weir_standby_applied_records_total");
            seen.push((metric(&b, "weir_standby_tasks"), applied));
            let last = &seen[seen.len().saturating_sub(3)..];
            last.len() == 3
                && last
                    .iter()
                    .all(|&(tasks, a)| tasks > 0 && a > 0 && a == applied)
        });
    }
    assert!(a.is_running() && b.is_running());
    let standby_tasks = metric(&b, "weir_standby_tasks");
    let restored_before = metric(&b, "weir_restore_restored_records_total");
    a.kill();
    let m = n + 3_000;
    f.produce(n, m - n);
    let truth = true_counts(m);
    let counts = wait_for_output(&f.output, Duration::from_secs(180), &mut [&mut b], |c| {
        *c == truth
    });
    assert_eq!(counts, truth, "exact after the takeover");
    let takeover = Takeover {
        restored: metric(&b, "weir_restore_restored_records_total") - restored_before,
        standby_tasks,
        takeovers: metric(&b, "weir_standby_takeovers_total"),
    };
    assert_eq!(b.stop(), Some(0));
    takeover
}

#[test]
fn standby_replicas_make_a_takeover_restore_only_the_tail() {
    let cold = takeover("standby-0", 0);
    let warm = takeover("standby-1", 1);
    println!(
        "changelog records read at takeover: {} without standbys, {} with",
        cold.restored, warm.restored
    );
    assert!(warm.standby_tasks > 0, "the survivor kept standby tasks");
    assert!(warm.takeovers > 0, "the takeover used them");
    assert!(cold.restored > 0, "a cold takeover reads the changelogs");
    assert!(
        warm.restored * 10 < cold.restored,
        "a warm takeover reads far less: {} vs {}",
        warm.restored,
        cold.restored
    );
}
