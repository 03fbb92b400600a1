//! Detections 3 and 4 over the system events of each host (the input key).
//!
//! [`SequenceDetector`] (store `dc-sequences`) keeps, per host, the partial
//! sequences younger than `sequence_window_ms`: files written, processes
//! started from a written file, and processes that read a sensitive file. A
//! connection outside the datacenter by a process that completes a sequence
//! raises one alert and removes the sequence, so the same sequence never
//! alerts twice.
//!
//! [`BurstDetector`] (store `dc-connections`) counts each host's `connect`
//! events per window; the host's first event of a later window closes the
//! open window: its count is scored against the host's [`Baseline`], and
//! either alerts (counts above the baseline only) or is learned.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::stats::Baseline;
use super::{
    Alert, CONNECTION_STORE, Object, Operation, Rule, SEQUENCE_STORE, Settings, SystemEvent,
};
use crate::processor::{Processor, ProcessorContext, ProcessorError, Record};

/// A partial sequence: its events so far (the first one's time starts it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Partial {
    /// The events, oldest first.
    pub events: Vec<SystemEvent>,
}

impl Partial {
    fn started(&self) -> i64 {
        self.events.first().map_or(i64::MIN, |e| e.ts)
    }
}

/// The stored partial sequences of one host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SequenceState {
    /// Files written (path → the write).
    pub written: BTreeMap<String, Partial>,
    /// Processes started from a written file (`pid:exe` → write, start).
    pub launched: BTreeMap<String, Partial>,
    /// Processes that read a sensitive file (`pid:exe` → the read).
    pub secrets_read: BTreeMap<String, Partial>,
}

impl SequenceState {
    fn forget_before(&mut self, oldest: i64) {
        for map in [
            &mut self.written,
            &mut self.launched,
            &mut self.secrets_read,
        ] {
            map.retain(|_, p| p.started() >= oldest);
        }
    }

    /// Feeds `e`; returns the sequence it completes, if any.
    fn feed(&mut self, e: &SystemEvent, s: &Settings) -> Option<(Rule, Partial)> {
        self.forget_before(e.ts - s.sequence_window_ms);
        let subject = format!("{}:{}", e.subject.pid, e.subject.exe);
        match (&e.op, &e.object) {
            (Operation::Write, Object::File { path }) => {
                self.written.insert(
                    path.clone(),
                    Partial {
                        events: vec![e.clone()],
                    },
                );
                None
            }
            (Operation::Read, Object::File { path }) if s.is_sensitive(path) => {
                self.secrets_read
                    .entry(subject)
                    .or_insert_with(|| Partial { events: Vec::new() })
                    .events
                    .push(e.clone());
                None
            }
            (Operation::Start, Object::Process { pid, exe }) => {
                if let Some(mut p) = self.written.remove(exe) {
                    p.events.push(e.clone());
                    self.launched.insert(format!("{pid}:{exe}"), p);
                }
                None
            }
            (Operation::Connect, Object::Network { address, .. }) if s.is_external(address) => {
                if let Some(mut p) = self.launched.remove(&subject) {
                    p.events.push(e.clone());
                    Some((Rule::DropperConnect, p))
                } else if let Some(mut p) = self.secrets_read.remove(&subject) {
                    p.events.push(e.clone());
                    Some((Rule::SecretExfiltration, p))
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

fn sequence_alert(host: &str, rule: Rule, p: Partial) -> Alert {
    let first = p.started();
    let last = p.events.last().map_or(first, |e| e.ts);
    Alert {
        rule,
        entity: host.to_string(),
        window_start: first,
        window_end: last,
        score: 1.0,
        evidence: p
            .events
            .iter()
            .map(|e| serde_json::to_value(e).expect("an event serializes"))
            .collect(),
        event_time: last,
    }
}

/// The processor of detection 3 (input key: host).
pub struct SequenceDetector {
    settings: Settings,
}

impl SequenceDetector {
    /// A sequence detector with these settings.
    pub fn new(settings: Settings) -> Self {
        SequenceDetector { settings }
    }
}

impl Processor<String, SystemEvent, String, Alert> for SequenceDetector {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, Alert>,
        record: Record<String, SystemEvent>,
    ) -> Result<(), ProcessorError> {
        let store = ctx.key_value_store::<String, SequenceState>(SEQUENCE_STORE)?;
        let mut state = store.get(&record.key)?.unwrap_or_default();
        let done = state.feed(&record.value, &self.settings);
        store.put(&record.key, &state)?;
        if let Some((rule, partial)) = done {
            let alert = sequence_alert(&record.key, rule, partial);
            let ts = alert.event_time;
            ctx.forward(Record::new(record.key, alert, ts))?;
        }
        Ok(())
    }
}

/// The stored connection window and baseline of one host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstState {
    /// Start of the open window (`None` before the first event).
    pub window_start: Option<i64>,
    /// Connections in the open window.
    pub connects: u64,
    /// Distinct destinations in the open window (evidence), capped.
    pub destinations: Vec<String>,
    /// Baseline of connections per window.
    pub baseline: Baseline,
}

/// Destinations kept as evidence per window.
const EVIDENCE_DESTINATIONS: usize = 10;

impl BurstState {
    fn close(&mut self, host: &str, s: &Settings) -> Option<Alert> {
        let start = self.window_start?;
        let count = self.connects as f64;
        let destinations = std::mem::take(&mut self.destinations);
        self.connects = 0;
        let score = self
            .baseline
            .score_with_floor(count, s.burst_min_std_fraction, 1.0);
        if self.baseline.learned >= s.warmup_windows
            && count > self.baseline.mean
            && score > s.burst_k
        {
            let end = start + s.window_ms;
            return Some(Alert {
                rule: Rule::ConnectionBurst,
                entity: host.to_string(),
                window_start: start,
                window_end: end,
                score,
                evidence: vec![json!({
                    "connects": count as u64,
                    "baseline_mean": self.baseline.mean,
                    "baseline_std": self.baseline.var.sqrt(),
                    "destinations": destinations,
                })],
                event_time: end - 1,
            });
        }
        self.baseline.learn(count, s.baseline_alpha);
        None
    }
}

/// The processor of detection 4 (input key: host).
pub struct BurstDetector {
    settings: Settings,
}

impl BurstDetector {
    /// A burst detector with these settings.
    pub fn new(settings: Settings) -> Self {
        BurstDetector { settings }
    }
}

impl Processor<String, SystemEvent, String, Alert> for BurstDetector {
    fn process(
        &mut self,
        ctx: &ProcessorContext<'_, String, Alert>,
        record: Record<String, SystemEvent>,
    ) -> Result<(), ProcessorError> {
        let store = ctx.key_value_store::<String, BurstState>(CONNECTION_STORE)?;
        let mut state = store.get(&record.key)?.unwrap_or_default();
        let window = self.settings.window_of(record.timestamp);
        match state.window_start {
            Some(open) if window < open => {
                ctx.record_late();
                return Ok(());
            }
            Some(open) if window > open => {
                if let Some(alert) = state.close(&record.key, &self.settings) {
                    let ts = alert.event_time;
                    ctx.forward(Record::new(record.key.clone(), alert, ts))?;
                }
                state.window_start = Some(window);
            }
            Some(_) => {}
            None => state.window_start = Some(window),
        }
        if let (Operation::Connect, Object::Network { address, port }) =
            (&record.value.op, &record.value.object)
        {
            state.connects += 1;
            let destination = format!("{address}:{port}");
            if state.destinations.len() < EVIDENCE_DESTINATIONS
                && !state.destinations.contains(&destination)
            {
                state.destinations.push(destination);
            }
        }
        store.put(&record.key, &state)
    }
}
