//! Broker failures on a real 3-broker cluster (`scripts/kafka cluster`,
//! replication factor 3, `min.insync.replicas=2`) while three instances of
//! word count run under exactly-once with `replication_factor=3`:
//!
//! 1. the leader of an input partition is killed (`kill -9`) and restarted;
//! 2. the transaction coordinator of an instance's transactional id is
//!    killed and restarted;
//! 3. the group coordinator of the application is killed for 16 s, longer
//!    than the controller's broker session timeout (12 s), so that it leaves
//!    the cluster's metadata, and restarted;
//! 4. a broker is paused (SIGSTOP, a long GC pause) for 20 s, then resumed.
//!
//! A killed broker is restarted only once the controller fenced it: one
//! back before that can split a transaction (a Kafka 4.4 defect, see
//! ARCHITECTURE.md), which no client can prevent.
//!
//! Input is written between the faults. No instance exits; the counts read
//! with `read_committed` equal the truth computed from the input, per word
//! the committed counts only grow (never repeat or go backwards), and the
//! changelog Weir created has three replicas.
//!
//! The test runs its own cluster on free ports, so the broker other tests
//! share is never touched.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::counting::{Fixture, tail, wait_for_output, word_count_truth};
use common::weir_app::WeirApp;
use weir::topologies::word_count;

/// A cluster of this test's own, driven with `scripts/kafka cluster`.
struct OwnCluster {
    port: u16,
}

impl OwnCluster {
    fn script(&self, args: &[&str]) -> String {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka");
        let out = Command::new(script)
            .arg("cluster")
            .args(args)
            .env("KAFKA_CLUSTER_PORT", self.port.to_string())
            .output()
            .expect("running scripts/kafka");
        let stderr = String::from_utf8_lossy(&out.stderr);
        print!("{stderr}");
        assert!(
            out.status.success(),
            "scripts/kafka cluster {args:?} failed on port {}: {stderr}",
            self.port
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn start_clean() -> OwnCluster {
        let cluster = OwnCluster {
            port: common::free_port_run(6),
        };
        cluster.script(&["start", "--brokers", "3", "--clean"]);
        cluster
    }

    /// `kill -9` of the broker with node id `node` (`scripts/kafka`
    /// gives node K the id K).
    fn kill(&self, node: i32) {
        self.script(&["kill", &node.to_string()]);
    }

    /// Starts the broker with node id `node` again, its data kept, once
    /// the controller fenced it (`TestBroker::fenced`: a broker back
    /// before that can split a transaction, a Kafka 4.4 defect).
    fn restart(&self, node: i32, apps: &mut [WeirApp]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !weir::testing::broker().fenced(node) {
            assert!(
                Instant::now() < deadline,
                "broker {node} was not fenced 60 s after it was killed"
            );
            watch(apps, Duration::from_millis(500));
        }
        self.script(&["restart", &node.to_string()]);
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        self.script(&["stop"]);
        let cache = std::env::var("WEIR_CACHE").map_or_else(
            |_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/weir"),
            PathBuf::from,
        );
        let dir = cache.join(format!("cluster-{}", self.port));
        if std::thread::panicking() {
            // The brokers' logs say why a restart or a count went wrong.
            println!("kept the cluster's logs and data in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn leader(topic: &str, partition: i32) -> (i32, usize) {
    weir::testing::broker().partition_leader(topic, partition)
}

/// Every instance still runs (none exited because of a broker fault).
fn all_running(apps: &mut [WeirApp]) {
    for (i, app) in apps.iter_mut().enumerate() {
        assert!(
            app.is_running(),
            "instance {i} exited during a broker fault; log:\n{}",
            tail(&app.log_text())
        );
    }
}

/// Keeps checking that every instance runs for `d`.
fn watch(apps: &mut [WeirApp], d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        all_running(apps);
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn broker_kills_and_pauses_on_a_cluster_keep_counts_exact() {
    let cluster = OwnCluster::start_clean();
    let bootstrap = cluster.script(&["bootstrap"]);
    // The harness reads the broker address once, from here on the cluster's.
    // SAFETY: this test binary has one test, and no other thread runs yet.
    unsafe { std::env::set_var("KAFKA_BOOTSTRAP_SERVERS", &bootstrap) };
    assert_eq!(common::bootstrap(), bootstrap);

    let mut f = Fixture::new("wc-cluster", &word_count::WORD_COUNT);
    f.extra.push("replication_factor=3".into());
    let guarantee = "exactly_once_v2";
    let mut apps: Vec<WeirApp> = (0..3).map(|i| f.start(i, guarantee)).collect();
    let n = 50_000u64;
    let step = n / 5;
    f.produce(0, step);
    wait_for_output(
        &f.output,
        Duration::from_secs(180),
        &mut apps.iter_mut().collect::<Vec<_>>(),
        |c| *c == word_count_truth(step),
    );
    let changelog = format!("{}-counts-changelog", f.app_id);
    let (_, replicas) = leader(&changelog, 0);
    assert_eq!(
        replicas, 3,
        "{changelog} is created with replication_factor=3"
    );

    // 1. The leader of input partition 0 dies while input is written.
    let (input_leader, _) = leader(&f.input, 0);
    println!("killing broker {input_leader}, leader of {}/0", f.input);
    cluster.kill(input_leader);
    f.produce(step, step);
    watch(&mut apps, Duration::from_secs(5));
    cluster.restart(input_leader, &mut apps);
    all_running(&mut apps);

    // 2. The transaction coordinator of instance 0's producer dies.
    let process_id = std::fs::read_to_string(
        f.dir
            .path()
            .join(format!("instance-0/{}/process.id", f.app_id)),
    )
    .expect("instance 0's process id");
    let transactional_id = format!("{}-{}-0", f.app_id, process_id.trim());
    let coordinator = weir::testing::broker().transaction_coordinator(&transactional_id);
    println!("killing broker {coordinator}, transaction coordinator of {transactional_id}");
    cluster.kill(coordinator);
    f.produce(2 * step, step);
    watch(&mut apps, Duration::from_secs(5));
    cluster.restart(coordinator, &mut apps);
    all_running(&mut apps);

    // 3. The group coordinator of the application dies, for longer than
    // the controller's broker session timeout (12 s): the cluster fences
    // it and the producers' metadata drops it, while each producer still
    // has it cached as the coordinator it sends the group's offsets to.
    let group_coordinator = weir::testing::broker().group_coordinator(&f.app_id);
    println!(
        "killing broker {group_coordinator}, group coordinator of {}",
        f.app_id
    );
    cluster.kill(group_coordinator);
    f.produce(3 * step, step / 2);
    watch(&mut apps, Duration::from_secs(16));
    cluster.restart(group_coordinator, &mut apps);
    all_running(&mut apps);

    // 4. A broker stops answering for 20 s (a long GC pause).
    let (paused, _) = leader(&changelog, 1);
    println!("pausing broker {paused} for 20 s");
    cluster.script(&["pause", &paused.to_string()]);
    std::thread::scope(|s| {
        // Written meanwhile (records for the paused broker wait for it or
        // for a new leader).
        let writer = s.spawn(|| f.produce(3 * step + step / 2, step / 2));
        watch(&mut apps, Duration::from_secs(20));
        cluster.script(&["resume", &paused.to_string()]);
        writer.join().expect("writing during the pause");
    });

    f.produce(4 * step, n - 4 * step);
    let truth = word_count_truth(n);
    let started = Instant::now();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for_output(
            &f.output,
            // Exact counts are the assertion; the time is reported. A stream
            // thread whose send_offsets_to_transaction never returns abandons
            // its producer 20 s into the call (thread::producer), so no wait
            // here should come near this.
            Duration::from_secs(240),
            &mut apps.iter_mut().collect::<Vec<_>>(),
            |c| *c == truth,
        )
    }));
    let counts = match waited {
        Ok(counts) => counts,
        Err(panic) => {
            println!("the counts did not reach the truth; the instances' warnings:");
            print_warnings(&apps);
            std::panic::resume_unwind(panic);
        }
    };
    let took = started.elapsed();
    println!(
        "3 brokers, 3 kills + 1 pause, {n} sentences: counts exact {took:?} after the last input"
    );
    assert_eq!(counts, truth);
    if took > Duration::from_secs(90) {
        println!("SLOW: the counts took {took:?} after the last input; the instances' warnings:");
        print_warnings(&apps);
    }

    // Per word, the committed counts only grow.
    let mut last: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    let mut records = 0;
    for r in common::read_to_end(&f.output) {
        let key = r.key.expect("word");
        let count = i64::from_be_bytes(r.value.expect("count").as_slice().try_into().unwrap());
        if let Some(&before) = last.get(&key) {
            assert!(
                count > before,
                "{}: committed count {count} after {before}",
                String::from_utf8_lossy(&key)
            );
        }
        last.insert(key, count);
        records += 1;
    }
    println!("{records} committed output records: per word strictly increasing");
    // After a transaction coordinator kill, librdkafka's
    // send_offsets_to_transaction was seen to never return; the stream
    // thread abandons such a call (thread::producer), so every instance
    // stops on SIGTERM.
    for app in apps.iter_mut() {
        let log = tail(&app.log_text());
        let code = app.try_stop(Duration::from_secs(60));
        assert_eq!(
            code,
            Some(Some(0)),
            "a graceful stop exits 0 within 60 s; log:\n{log}"
        );
    }
}

/// Prints every line of the instances' logs that is not INFO.
fn print_warnings(apps: &[WeirApp]) {
    for (i, app) in apps.iter().enumerate() {
        for line in app.log_text().lines().filter(|l| !l.contains(" INFO ")) {
            println!("instance {i}: {line}");
        }
    }
}
