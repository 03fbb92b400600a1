//! TLS and SASL on the real broker (`scripts/kafka start --secure`: a
//! SASL_SSL listener with SCRAM-SHA-512 and a certificate from a test CA):
//!
//! * word count runs through TLS + SCRAM with only configuration (the
//!   `kafka.` options `scripts/kafka secure-settings` prints) under
//!   exactly-once, and its counts are exact; the tools (`weir generate`,
//!   `query`, `table`, `reset`) take the same options with `--kafka`;
//! * a wrong password stops start-up within seconds with a message that
//!   says so;
//! * a certificate signed by a CA the client does not trust stops start-up
//!   within seconds with a message that says so.
//!
//! The test runs its own broker on free ports; the harness writes and reads
//! through its plain listener.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::counting::{Fixture, tail, wait_for_output, word_count_truth};
use weir::topologies::word_count;

struct SecureBroker {
    port: u16,
}

impl SecureBroker {
    fn script(&self, args: &[&str]) -> String {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka");
        let out = Command::new(script)
            .args(args)
            .env("KAFKA_PORT", self.port.to_string())
            .output()
            .expect("running scripts/kafka");
        assert!(
            out.status.success(),
            "scripts/kafka {args:?} failed on port {}: {}",
            self.port,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The settings of the SASL_SSL listener, as `key=value` lines.
    fn settings(&self) -> Vec<String> {
        self.script(&["secure-settings"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for SecureBroker {
    fn drop(&mut self) {
        self.script(&["stop"]);
    }
}

/// Runs `weir run word-count` with `settings` until it exits; the exit
/// code, how long it ran and its log.
fn refused_start(f: &Fixture, name: &str, settings: &[String]) -> (Option<i32>, Duration, String) {
    let mut all = f.settings("exactly_once_v2");
    all.extend(settings.iter().cloned());
    let started = Instant::now();
    let mut app = common::weir_app::WeirApp::start(
        "word-count",
        &f.dir.path().join(name),
        &f.dir.path().join(format!("{name}.log")),
        &all,
    );
    while app.is_running() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name}: still running after 60 s; log:\n{}",
            tail(&app.log_text())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (app.exit_code(), started.elapsed(), app.log_text())
}

#[test]
fn tls_and_scram_need_only_configuration_and_bad_credentials_stop_start_up() {
    let broker = SecureBroker {
        port: common::free_port_run(3),
    };
    broker.script(&["start", "--clean", "--secure"]);
    // The harness writes and reads through the plain listener.
    // SAFETY: this test binary has one test, and no other thread runs yet.
    unsafe {
        std::env::set_var(
            "KAFKA_BOOTSTRAP_SERVERS",
            format!("127.0.0.1:{}", broker.port),
        )
    };
    let secure = broker.settings();
    assert!(
        secure
            .iter()
            .any(|s| s == "kafka.security.protocol=SASL_SSL"),
        "{secure:?}"
    );

    // 1. Word count through TLS + SCRAM.
    let mut f = Fixture::new("wc-secure", &word_count::WORD_COUNT);
    f.extra = secure.clone();
    let n = 5_000;
    f.produce(0, n);
    let mut a = f.start(0, "exactly_once_v2");
    let mut b = f.start(1, "exactly_once_v2");
    let truth = word_count_truth(n);
    let counts = wait_for_output(
        &f.output,
        Duration::from_secs(180),
        &mut [&mut a, &mut b],
        |c| *c == truth,
    );
    assert_eq!(counts, truth);
    println!("word count over SASL_SSL (SCRAM-SHA-512): {n} sentences, counts exact");

    // The tools take the same options: generate, query, table, reset.
    let tool = |args: &[&str]| -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(args).env_remove("WEIR_BOOTSTRAP_SERVERS");
        for s in &secure {
            match s.strip_prefix("bootstrap_servers=") {
                Some(b) => cmd.args(["--bootstrap-servers", b]),
                None => cmd.args(["--kafka", s]),
            };
        }
        let out = cmd.output().expect("running weir");
        assert!(
            out.status.success(),
            "weir {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let (input, output) = (
        format!("topology.input_topic={}", f.input),
        format!("topology.output_topic={}", f.output),
    );
    let (start, count) = (n.to_string(), n.to_string());
    tool(&[
        "generate",
        "word-count",
        "--start",
        &start,
        "--count",
        &count,
        "--set",
        &input,
        "--set",
        &output,
    ]);
    let truth = word_count_truth(2 * n);
    wait_for_output(
        &f.output,
        Duration::from_secs(180),
        &mut [&mut a, &mut b],
        |c| *c == truth,
    );
    let (word, expected) = truth.iter().next().unwrap();
    let answer: serde_json::Value = serde_json::from_str(&tool(&[
        "query",
        "counts",
        word,
        "--application-id",
        &f.app_id,
    ]))
    .unwrap();
    assert_eq!(answer["value"].as_i64(), Some(*expected), "{answer}");
    let table: std::collections::BTreeMap<String, i64> =
        tool(&["table", &f.output, "--value", "i64"])
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('\t').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect();
    assert_eq!(table, truth, "weir table over SASL_SSL");
    for app in [&mut a, &mut b] {
        let log = tail(&app.log_text());
        assert_eq!(app.stop(), Some(0), "graceful stop exits 0; log:\n{log}");
    }
    let state = f.dir.path().join("reset-state");
    tool(&[
        "reset",
        "--application-id",
        &f.app_id,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    println!("weir generate, query, table and reset over SASL_SSL: as without TLS");

    // 2. A wrong password.
    let wrong_password: Vec<String> = secure
        .iter()
        .map(|s| {
            if s.starts_with("kafka.sasl.password=") {
                "kafka.sasl.password=not-the-password".to_string()
            } else {
                s.clone()
            }
        })
        .collect();
    let (code, took, log) = refused_start(&f, "wrong-password", &wrong_password);
    println!("wrong password: exit {code:?} after {took:?}");
    assert_eq!(code, Some(1), "{}", tail(&log));
    assert!(
        took < Duration::from_secs(15),
        "stops within seconds: {took:?}"
    );
    assert!(
        log.contains("SASL authentication failed: wrong user name or password?"),
        "{}",
        tail(&log)
    );

    // 3. A broker certificate the client does not trust.
    let untrusted: Vec<String> = secure
        .iter()
        .map(|s| s.replace("/ca.crt", "/untrusted-ca.crt"))
        .collect();
    assert_ne!(untrusted, secure);
    let (code, took, log) = refused_start(&f, "untrusted", &untrusted);
    println!("untrusted certificate: exit {code:?} after {took:?}");
    assert_eq!(code, Some(1), "{}", tail(&log));
    assert!(
        took < Duration::from_secs(15),
        "stops within seconds: {took:?}"
    );
    assert!(
        log.contains("TLS: the broker's certificate is not trusted"),
        "{}",
        tail(&log)
    );
}
