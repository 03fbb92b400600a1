//! The `datacenter-monitor` topology through the in-memory test driver: on
//! generated traffic every injected anomaly is alerted exactly once by its
//! rule, the background alone raises no alert, and a task restart in the
//! middle changes nothing.

use std::collections::BTreeMap;

use weir::driver::{DriverConfig, TestInputTopic, TestOutputTopic, TopologyTestDriver};
use weir::serdes::{JsonSerde, StringSerde};
use weir::topologies::datacenter_monitor::generate::{self, Dataset, Spec, generate};
use weir::topologies::datacenter_monitor::{Alert, Rule, SystemEvent, TaskUsage, build};

fn driver() -> TopologyTestDriver {
    let t = weir::topologies::find("datacenter-monitor").unwrap();
    let topology = build(&t.params(&Default::default()).unwrap()).unwrap();
    TopologyTestDriver::new(topology, DriverConfig::new("dcmon")).unwrap()
}

/// Pipes both topics of `d` in event-time order; with `restart_at`, restarts
/// the tasks after that many records. Returns the alerts.
fn run(d: &Dataset, restart_at: Option<usize>) -> Vec<Alert> {
    let mut driver = driver();
    let usage = TestInputTopic::new("task-usage", StringSerde, JsonSerde::<TaskUsage>::new());
    let events = TestInputTopic::new(
        "system-events",
        StringSerde,
        JsonSerde::<SystemEvent>::new(),
    );
    let alerts = TestOutputTopic::new("alerts", StringSerde, JsonSerde::<Alert>::new());
    let (mut u, mut e) = (0, 0);
    let mut piped = 0;
    while u < d.usage.len() || e < d.events.len() {
        let take_usage =
            e >= d.events.len() || (u < d.usage.len() && d.usage[u].start_time <= d.events[e].ts);
        if take_usage {
            let r = &d.usage[u];
            driver
                .pipe(&usage, r.machine_id.clone(), r.clone(), r.start_time)
                .unwrap();
            u += 1;
        } else {
            let r = &d.events[e];
            driver
                .pipe(&events, r.host.clone(), r.clone(), r.ts)
                .unwrap();
            e += 1;
        }
        piped += 1;
        if restart_at == Some(piped) {
            driver.restart_tasks().unwrap();
        }
    }
    driver
        .read_records(&alerts)
        .unwrap()
        .into_iter()
        .map(|r| {
            assert_eq!(r.key, r.value.entity, "alerts are keyed by entity");
            r.value
        })
        .collect()
}

type Identity = (Rule, String, i64);

fn counts(alerts: &[Alert]) -> BTreeMap<Identity, usize> {
    let mut out = BTreeMap::new();
    for a in alerts {
        *out.entry(a.identity()).or_insert(0) += 1;
    }
    out
}

#[test]
fn background_alone_raises_no_alert() {
    let d = generate(&Spec {
        per_kind: 0,
        ..Spec::default()
    });
    assert!(d.truth.is_empty());
    let alerts = run(&d, None);
    assert!(alerts.is_empty(), "false alerts: {alerts:#?}");
}

#[test]
fn every_injected_anomaly_is_alerted_once_by_its_rule() {
    let d = generate(&Spec::default());
    let alerts = run(&d, None);
    let got = counts(&alerts);
    for rule in [
        Rule::MachineMetric,
        Rule::OutlierTask,
        Rule::DropperConnect,
        Rule::SecretExfiltration,
        Rule::ConnectionBurst,
    ] {
        let expected: Vec<Identity> = d
            .truth
            .iter()
            .filter(|t| t.rule == rule)
            .map(|t| t.identity())
            .collect();
        assert!(!expected.is_empty(), "{rule:?} has injections");
        for id in &expected {
            assert_eq!(got.get(id), Some(&1), "{id:?} alerted exactly once");
        }
    }
    let false_alerts: Vec<&Alert> = alerts
        .iter()
        .filter(|a| !d.truth.iter().any(|t| t.identity() == a.identity()))
        .collect();
    assert!(false_alerts.is_empty(), "false alerts: {false_alerts:#?}");
}

#[test]
fn a_task_restart_midway_gives_the_same_alerts() {
    let d = generate(&Spec::default());
    let straight = run(&d, None);
    let restarted = run(&d, Some((d.usage.len() + d.events.len()) / 2));
    assert_eq!(counts(&straight), counts(&restarted));
}

#[test]
fn the_generated_samples_alert_exactly_their_ground_truth() {
    // What `weir generate datacenter-monitor` writes, twice over (the
    // second repetition shifted in time), routed to both input topics.
    let t = weir::topologies::find("datacenter-monitor").unwrap();
    let dataset = t.dataset.expect("datacenter-monitor has a ground truth");
    let n = (dataset.len)();
    let mut driver = driver();
    let params = t.params(&Default::default()).unwrap();
    let inputs = t.input_topics(&params);
    let headers = weir::processor::Headers::new();
    let mut routed = [0u64; 2];
    for i in 0..2 * n {
        let (key, value) = (t.sample)(i);
        let input = (dataset.input_of)(i);
        routed[input] += 1;
        driver
            .pipe_raw(&inputs[input], key.as_deref(), Some(&value), 0, &headers)
            .unwrap();
    }
    assert!(
        routed.iter().all(|&r| r > 0),
        "both topics get samples: {routed:?}"
    );
    let truth = generate::sample_truth(0, 2 * n);
    assert_eq!(
        truth.len(),
        2 * generate::KINDS.len() * 3,
        "two repetitions' anomalies"
    );
    assert!(
        generate::sample_truth(1, 2 * n).len() < truth.len(),
        "partial repetitions are left out"
    );
    let alerts = TestOutputTopic::new("alerts", StringSerde, JsonSerde::<Alert>::new());
    let got = counts(
        &driver
            .read_records(&alerts)
            .unwrap()
            .into_iter()
            .map(|r| r.value)
            .collect::<Vec<_>>(),
    );
    let expected: BTreeMap<Identity, usize> = truth.iter().map(|t| (t.identity(), 1)).collect();
    assert_eq!(got, expected, "every injected anomaly once, nothing else");
}
