//! `datacenter-monitor` on the real broker, run the way an operator runs it:
//! `weir generate datacenter-monitor --truth` writes one complete generated
//! dataset (both input topics, anomalies of every kind injected) while two
//! `weir run` instances process it under `exactly_once_v2`; one instance is
//! SIGKILLed mid-run and restarted. The alerts read back with
//! `read_committed` must hold every injected anomaly exactly once, which
//! the test derives from the ground-truth file alone; false alerts on the
//! background are counted (and must be none).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::counting::{serial, tail, wait_until};
use common::weir_app::WeirApp;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir::topologies::datacenter_monitor::generate::{Injected, KINDS};
use weir::topologies::datacenter_monitor::{Alert, Rule};

type Identity = (Rule, String, i64);

/// Records per second `weir generate` writes: the dataset's 30 minutes of
/// event time pass in about a minute (31× real time). A failover stalls
/// some tasks for about the session timeout (10 s) plus the restart, which
/// is then 5 minutes of event time or more. The job windows of the outlier
/// rule wait [`OUTLIER_GRACE_WINDOWS`] one-minute windows for the stalled
/// machines' tasks, as a failover of seconds is in real time; with the
/// default grace of 10 windows a loaded CI machine's stall of over 20 s
/// once closed a job window without them (their means were dropped as
/// late, and an outlier alert was missed). At 4,000 records/s every
/// failover exceeds the default grace.
const GENERATE_RATE: u64 = 1_000;
/// The outlier rule's grace (`topology.outlier_grace_windows`) for this
/// replay at 31× real time: 20 windows, 40 s of real time.
const OUTLIER_GRACE_WINDOWS: u32 = 20;

struct Topics {
    app_id: String,
    usage: String,
    events: String,
    alerts: String,
}

impl Topics {
    fn new() -> Topics {
        let app_id = common::unique_topic("dcmon");
        let t = Topics {
            usage: format!("{app_id}-usage"),
            events: format!("{app_id}-events"),
            alerts: format!("{app_id}-alerts"),
            app_id,
        };
        // As the compose stack does: `weir generate --count 0` creates the
        // input and output topics and writes nothing.
        let status = t
            .generate_command(&["--count", "0", "--partitions", "4"])
            .status();
        assert!(status.unwrap().success(), "weir generate --count 0 failed");
        let client: BaseConsumer = common::base_config().create().unwrap();
        for topic in [&t.usage, &t.events, &t.alerts] {
            let metadata = client
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .unwrap();
            assert_eq!(
                metadata.topics()[0].partitions().len(),
                4,
                "{topic} created"
            );
            assert!(common::read_to_end(topic).is_empty(), "{topic} is empty");
        }
        t
    }

    /// `weir generate datacenter-monitor` on these topics with `args`.
    fn generate_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.args(["generate", "datacenter-monitor", "--bootstrap-servers"])
            .arg(common::bootstrap())
            .args(args);
        for p in self.params() {
            cmd.arg("--set").arg(p);
        }
        cmd.env_remove("WEIR_BOOTSTRAP_SERVERS")
            .stdout(Stdio::null());
        cmd
    }

    fn params(&self) -> Vec<String> {
        vec![
            format!("topology.usage_topic={}", self.usage),
            format!("topology.events_topic={}", self.events),
            format!("topology.alerts_topic={}", self.alerts),
        ]
    }

    /// `weir generate datacenter-monitor` at `rate` records/s, writing the
    /// ground truth to `truth`; runs in the background.
    fn generate(&self, truth: &Path, rate: u64) -> Child {
        let (rate, truth) = (rate.to_string(), truth.display().to_string());
        self.generate_command(&["--rate", &rate, "--truth", &truth])
            .spawn()
            .expect("starting weir generate")
    }

    fn start(&self, dir: &Path, instance: usize) -> WeirApp {
        let mut settings = vec![
            format!("application_id={}", self.app_id),
            "processing_guarantee=exactly_once_v2".to_string(),
        ];
        settings.extend(self.params());
        settings.push(format!(
            "topology.outlier_grace_windows={OUTLIER_GRACE_WINDOWS}"
        ));
        WeirApp::start(
            "datacenter-monitor",
            &dir.join(format!("instance-{instance}")),
            &dir.join(format!("instance-{instance}.log")),
            &settings,
        )
    }

    /// The committed alerts: how many times each identity was alerted.
    fn alerts(&self) -> BTreeMap<Identity, usize> {
        let mut counts = BTreeMap::new();
        for r in common::read_to_end(&self.alerts) {
            let alert: Alert =
                serde_json::from_slice(r.value.as_deref().expect("alerts have values"))
                    .expect("alerts are JSON");
            assert_eq!(
                r.key.as_deref(),
                Some(alert.entity.as_bytes()),
                "keyed by entity"
            );
            *counts.entry(alert.identity()).or_insert(0) += 1;
        }
        counts
    }
}

/// The ground truth `weir generate` wrote, read back from its file.
fn read_truth(path: &Path, generator: &mut Child) -> Vec<Injected> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(truth) = serde_json::from_str::<Vec<Injected>>(&text)
        {
            return truth;
        }
        assert!(
            generator.try_wait().unwrap().is_none_or(|s| s.success()),
            "weir generate failed"
        );
        assert!(
            Instant::now() < deadline,
            "no ground truth in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `weir_produced_records_total{topic}` on `app`'s `/metrics`.
fn produced(app: &WeirApp, topic: &str) -> f64 {
    let label = format!("topic=\"{topic}\"");
    let (_, body) = app.http_get("/metrics").expect("metrics served");
    body.lines()
        .filter(|l| l.starts_with("weir_produced_records_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Waits until `done(alerts)` holds while both instances keep running.
fn wait_for_alerts(
    topics: &Topics,
    apps: &mut [&mut WeirApp],
    timeout: Duration,
    done: impl Fn(&BTreeMap<Identity, usize>) -> bool,
) -> BTreeMap<Identity, usize> {
    wait_until(
        timeout,
        Duration::from_millis(500),
        apps,
        || topics.alerts(),
        done,
    )
}

#[test]
fn every_injected_anomaly_is_alerted_exactly_once_across_a_sigkill() {
    let _serial = serial();
    let topics = Topics::new();
    let dir = tempfile::tempdir().unwrap();
    let truth_path = dir.path().join("truth.json");
    let began = Instant::now();
    let mut stable = topics.start(dir.path(), 0);
    let mut victim = topics.start(dir.path(), 1);
    let mut generator = topics.generate(&truth_path, GENERATE_RATE);

    let truth = read_truth(&truth_path, &mut generator);
    let expected: BTreeSet<Identity> = truth.iter().map(Injected::identity).collect();
    assert_eq!(
        expected.len(),
        truth.len(),
        "injected anomalies are distinct"
    );
    for kind in KINDS {
        assert!(
            truth.iter().any(|t| t.anomaly == kind),
            "{kind:?} is injected"
        );
    }

    // Mid-run: once the first alerts are committed and while input still
    // arrives, SIGKILL one instance and start it again.
    let first = wait_for_alerts(
        &topics,
        &mut [&mut stable, &mut victim],
        Duration::from_secs(180),
        |a| !a.is_empty(),
    );
    let generating = generator.try_wait().unwrap().is_none();
    victim.kill();
    println!(
        "SIGKILL after {:.1} s with {} alerts committed (generator still writing: {generating})",
        began.elapsed().as_secs_f64(),
        first.len()
    );
    let mut victim = topics.start(dir.path(), 1);
    assert!(generator.wait().unwrap().success(), "weir generate failed");

    let got = wait_for_alerts(
        &topics,
        &mut [&mut stable, &mut victim],
        Duration::from_secs(300),
        |a| expected.iter().all(|id| a.contains_key(id)),
    );
    println!(
        "all {} anomalies alerted after {:.1} s",
        expected.len(),
        began.elapsed().as_secs_f64()
    );
    // Let what is in flight commit, then stop both cleanly and read again.
    std::thread::sleep(Duration::from_secs(5));
    // The dashboard's alert count: acknowledged records of the alerts topic.
    let metered: f64 = [&stable, &victim]
        .iter()
        .map(|app| produced(app, &topics.alerts))
        .sum();
    println!("weir_produced_records_total of the alerts topic on the live instances: {metered}");
    assert!(metered >= 1.0, "alerts are metered");
    assert_eq!(stable.stop(), Some(0), "{}", tail(&stable.log_text()));
    assert_eq!(victim.stop(), Some(0), "{}", tail(&victim.log_text()));
    let last = topics.alerts();
    assert!(last.len() >= got.len());

    let duplicated: Vec<_> = last.iter().filter(|(_, n)| **n > 1).collect();
    let false_alerts: Vec<_> = last.keys().filter(|id| !expected.contains(id)).collect();
    let missed: Vec<_> = expected
        .iter()
        .filter(|id| !last.contains_key(id))
        .collect();
    println!(
        "recall {}/{}; duplicates {}; false alerts {}",
        expected.len() - missed.len(),
        expected.len(),
        duplicated.len(),
        false_alerts.len()
    );
    assert!(missed.is_empty(), "missed: {missed:#?}");
    assert!(
        duplicated.is_empty(),
        "alerted more than once: {duplicated:#?}"
    );
    assert!(false_alerts.is_empty(), "false alerts: {false_alerts:#?}");
}
