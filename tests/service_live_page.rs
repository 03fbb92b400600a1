//! The live page (`GET /ui`) in a real headless browser (Debian's
//! Chromium), against a running instance under overload on the real broker:
//! the page draws every node of the topology with its current rate and busy
//! ratio, the state, the shed counts, the lag per partition and the scaling
//! recommendation. A screenshot is kept in the test's target directory.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weir::runtime::{AppState, KafkaStreams};
use weir::topology::{Consumed, Produced, StreamsBuilder};

const RATE: u64 = 1_500;

/// Runs headless Chromium on `url` with `args`; its stdout.
fn chromium(url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("running chromium (scripts/setup installs it)");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

/// The opening tag of the SVG group drawn for node `name`.
fn node_tag<'a>(dom: &'a str, name: &str) -> &'a str {
    let at = dom
        .find(&format!("data-node=\"{name}\""))
        .unwrap_or_else(|| panic!("node {name} is not drawn"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..=end]
}

fn attribute(tag: &str, name: &str) -> Option<f64> {
    let from = tag.find(&format!("{name}=\""))? + name.len() + 2;
    let to = from + tag[from..].find('"')?;
    tag[from..to].parse().ok()
}

/// The text of the element with id `id`.
fn by_id<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let from = at + dom[at..].find('>').unwrap() + 1;
    let to = from + dom[from..].find('<').unwrap();
    &dom[from..to]
}

#[test]
fn the_live_page_shows_the_topology_rates_state_shedding_lag_and_scaling() {
    let app_id = common::unique_topic("live-page");
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[(&input, 2), (&output, 2)]));
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>(&input, Consumed::new())
        .filter(|_, v: &String| !v.is_empty())
        .map_values(|v: String| {
            std::thread::sleep(Duration::from_millis(1));
            v
        })
        .to(&output, Produced::new());
    let topology = builder.build().unwrap();
    let description = topology.describe();
    let dir = tempfile::tempdir().unwrap();
    let mut config = weir::config::StreamsConfig::new(&app_id, common::bootstrap());
    config.state_dir = dir.path().to_path_buf();
    config.http_bind = Some("127.0.0.1:0".parse().unwrap());
    config.scaling_window_ms = 6_000;
    config.shed_max_lag_ms = Some(500);
    let mut app = KafkaStreams::new(topology, config).unwrap();
    app.start().unwrap();
    let addr = app.http_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (input, stop) = (input.clone(), stop.clone());
        std::thread::spawn(move || common::produce_at_rate(&input, RATE, 100, &stop))
    };

    // Wait until the instance has a scaling answer and sheds.
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, live) = common::weir_app::get_json(addr, "/live");
        let shed = live["dropped"]["0"]["shed"]["total"]
            .as_f64()
            .unwrap_or(0.0);
        if status == 200
            && app.state() == AppState::Running
            && shed > 0.0
            && live["scaling"]["recommended_instances"].is_u64()
        {
            println!("GET /live: {live}");
            break;
        }
        assert!(Instant::now() < until, "no live figures: {live}");
        std::thread::sleep(Duration::from_millis(500));
    }

    let url = format!("http://{addr}/ui");
    let dom = chromium(&url, &["--dump-dom"]);
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("live-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &url,
        &[
            "--window-size=1400,900",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(app.close(Duration::from_secs(60)));

    // Every node of the topology is drawn.
    let mut names = Vec::new();
    for sub in &description.subtopologies {
        for node in &sub.nodes {
            node_tag(&dom, &node.name);
            names.push(node.name.clone());
        }
    }
    println!("drawn: {names:?}");
    // The expensive node shows its rate and busy ratio.
    let mapper = names
        .iter()
        .find(|n| n.contains("MAPVALUES"))
        .expect("a map_values node");
    let tag = node_tag(&dom, mapper);
    let rate = attribute(tag, "data-rate").expect("a rate");
    let busy = attribute(tag, "data-busy").expect("a busy ratio");
    println!("{mapper}: {rate} records/s, busy {busy}");
    assert!(rate > 100.0, "the page shows {mapper} processing: {rate}/s");
    assert!(
        busy > 0.3,
        "a 1 ms operator at its limit is mostly busy: {busy}"
    );
    assert_eq!(by_id(&dom, "state"), "Running");
    let recommended: u64 = by_id(&dom, "recommended")
        .parse()
        .expect("a recommended instance count");
    assert!(recommended >= 1, "{recommended}");
    let drops = dom
        .split("data-drops=\"0\"")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .expect("the drops line of sub-topology 0");
    println!("sub-topology 0 {drops}");
    let shed: f64 = drops
        .split("shed ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .map(|s| s.replace(',', ""))
        .and_then(|s| s.parse().ok())
        .expect("a shed count");
    assert!(shed > 0.0, "shed records are shown: {drops}");
    assert!(
        dom.contains(&format!("{input} / 0")) && dom.contains(&format!("{input} / 1")),
        "the lag of both input partitions is listed"
    );
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot: {} bytes",
        png.len()
    );
    println!("screenshot: {}", shot.display());
}
