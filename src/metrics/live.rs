//! The live view behind `GET /live` and the page at `GET /ui`: rates over
//! the last [`INTERVAL`], computed on the instance (so the page only
//! draws, and a browser's clock does not matter).
//!
//! Per processor node: records per second, busy ratio (busy seconds per
//! second, over the instance's tasks and threads) and true rate (records
//! per busy second). Per sub-topology: records dropped in the interval and
//! in all, by reason (`late`, `shed`, `deserialization_error`,
//! `processing_error`). Per partition: the consumer lag. The HTTP server
//! adds the application's state and the latest scaling answer.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::sample::{Sample, delta};

/// How often the live view is refreshed.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// The live view from two samples [`INTERVAL`] apart.
pub fn snapshot(before: &Sample, after: &Sample) -> Value {
    let dt = after
        .at
        .saturating_duration_since(before.at)
        .as_secs_f64()
        .max(1e-3);
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut nodes = serde_json::Map::new();
    for ((sub, name), &(records, busy)) in &after.nodes {
        let was = before.nodes.get(&(*sub, name.clone()));
        let r = delta(was.map(|w| w.0), records);
        let b = delta(was.map(|w| w.1), busy);
        nodes.insert(
            name.clone(),
            json!({
                "subtopology": sub,
                "rate": round(r / dt),
                "busy_ratio": round(b / dt),
                "true_rate": (b > 0.0 && r > 0.0).then(|| round(r / b)),
                "records": records,
            }),
        );
    }
    let mut subtopologies: BTreeMap<u32, serde_json::Map<String, Value>> = BTreeMap::new();
    for ((sub, reason), &total) in &after.drops {
        let was = before.drops.get(&(*sub, reason.clone())).copied();
        subtopologies.entry(*sub).or_default().insert(
            reason.clone(),
            json!({ "total": total, "per_second": round(delta(was, total) / dt) }),
        );
    }
    let lag: Vec<Value> = after
        .lag
        .iter()
        .map(|((topic, partition), (records, _, _))| {
            json!({ "topic": topic, "partition": partition, "records": records })
        })
        .collect();
    json!({
        "interval_seconds": round(dt),
        "nodes": nodes,
        "dropped": subtopologies
            .into_iter()
            .map(|(sub, reasons)| (sub.to_string(), Value::Object(reasons)))
            .collect::<serde_json::Map<_, _>>(),
        "lag": lag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn sample(at: Instant, node: (f64, f64), shed: f64) -> Sample {
        Sample {
            at,
            tasks: BTreeMap::new(),
            lag: BTreeMap::from([(("in".to_string(), 0), (42.0, 100.0, at))]),
            ends: BTreeMap::new(),
            nodes: BTreeMap::from([((0, "KSTREAM-MAPVALUES-0000000001".to_string()), node)]),
            drops: BTreeMap::from([((0, "shed".to_string()), shed)]),
        }
    }

    #[test]
    fn node_rates_busy_ratio_and_drops_over_the_interval() {
        let t0 = Instant::now();
        let before = sample(t0, (1_000.0, 1.0), 10.0);
        let after = sample(t0 + Duration::from_secs(2), (3_000.0, 2.0), 110.0);
        let v = snapshot(&before, &after);
        let node = &v["nodes"]["KSTREAM-MAPVALUES-0000000001"];
        assert_eq!(node["rate"], 1_000.0);
        assert_eq!(node["busy_ratio"], 0.5);
        assert_eq!(node["true_rate"], 2_000.0);
        assert_eq!(v["dropped"]["0"]["shed"]["per_second"], 50.0);
        assert_eq!(v["dropped"]["0"]["shed"]["total"], 110.0);
        assert_eq!(v["lag"][0]["records"], 42.0);
    }
}
