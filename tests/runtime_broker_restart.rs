//! The broker stops for 30 s and starts again (data kept) while two
//! instances of word count run under exactly-once, and a third instance is
//! started while it is down: no instance exits (the third retries the
//! broker for `startup_timeout_ms`), output resumes by itself, and the
//! counts read with `read_committed` equal the truth computed from the
//! input.
//!
//! The test runs its own broker (`scripts/kafka` on a free port, so the
//! broker other tests share is never stopped) and points the harness at it.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::counting::{Fixture, tail, wait_for_output, word_count_truth};
use weir::topologies::word_count;

/// A broker of this test's own, started and stopped with `scripts/kafka`.
struct OwnBroker {
    port: u16,
}

impl OwnBroker {
    fn script(&self, args: &[&str]) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka");
        let status = Command::new(script)
            .args(args)
            .env("KAFKA_PORT", self.port.to_string())
            .status()
            .expect("running scripts/kafka");
        assert!(
            status.success(),
            "scripts/kafka {args:?} failed on port {}",
            self.port
        );
    }

    fn start_clean() -> OwnBroker {
        let broker = OwnBroker {
            port: common::free_port_run(2),
        };
        broker.script(&["start", "--clean"]);
        broker
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.script(&["stop"]);
    }
}

#[test]
fn a_broker_restart_of_30_seconds_stops_no_instance_and_counts_stay_exact() {
    let broker = OwnBroker::start_clean();
    // The harness reads the broker address once, from here on this one's.
    // SAFETY: this test binary has one test, and no other thread runs yet.
    unsafe { std::env::set_var("KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap()) };
    assert_eq!(common::bootstrap(), broker.bootstrap());

    let f = Fixture::new("wc-broker-restart", &word_count::WORD_COUNT);
    let n = 40_000u64;
    f.produce(0, n / 2);
    let mut a = f.start(0, "exactly_once_v2");
    let mut b = f.start(1, "exactly_once_v2");
    let first_half = word_count_truth(n / 2);
    wait_for_output(
        &f.output,
        Duration::from_secs(180),
        &mut [&mut a, &mut b],
        |c| *c == first_half,
    );

    broker.script(&["stop"]);
    let stopped = Instant::now();
    let mut c = None;
    while stopped.elapsed() < Duration::from_secs(30) {
        if c.is_none() && stopped.elapsed() > Duration::from_secs(10) {
            // An instance (re)started while the broker is still down.
            c = Some(f.start(2, "exactly_once_v2"));
        }
        for (name, app) in [("a", &mut a), ("b", &mut b)]
            .into_iter()
            .chain(c.as_mut().map(|c| ("c (started while down)", c)))
        {
            assert!(
                app.is_running(),
                "instance {name} exited while the broker was down; log:\n{}",
                tail(&app.log_text())
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let mut c = c.expect("instance c started");
    broker.script(&["start"]);
    let restarted = Instant::now();
    f.produce(n / 2, n / 2);

    let truth = word_count_truth(n);
    let counts = wait_for_output(
        &f.output,
        Duration::from_secs(300),
        &mut [&mut a, &mut b, &mut c],
        |c| *c == truth,
    );
    println!(
        "broker down 30 s: all instances kept running; counts exact {:?} after the restart",
        restarted.elapsed()
    );
    assert!(
        c.log_text()
            .contains("the broker does not answer yet; retrying"),
        "instance c waited for the broker at start-up:\n{}",
        tail(&c.log_text())
    );
    for app in [&mut a, &mut b, &mut c] {
        let log = tail(&app.log_text());
        assert_eq!(app.stop(), Some(0), "graceful stop exits 0; log:\n{log}");
    }
    assert_eq!(counts, truth);
}
