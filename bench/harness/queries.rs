//! `weir-bench queries`: interactive query speed. Two instances of the
//! `count` workload (in this process, exactly-once) hold one count per key;
//! then
//!
//! * local `get` latency: `KeyValueQuery::get` on instance A of keys whose
//!   task runs on A, one at a time (the library path);
//! * routed HTTP: client threads on loopback ask instance A's
//!   `/stores/counts/keys/{key}` for `--seconds`, first for keys A runs
//!   (local hits), then for keys B runs (each forwarded once to B);
//!   requests per second and latency percentiles.
//!
//! The section between [`BEGIN`] and [`END`] of BENCHMARKS.md is rewritten
//! (`weir-bench report` keeps it).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use weir::config::StreamsConfig;
use weir::runtime::{AppState, KafkaStreams};

use crate::run::{create_topics, delete_topics, producer, send};

/// Where the section starts and ends in BENCHMARKS.md.
pub const BEGIN: &str = "<!-- queries:begin -->";
/// See [`BEGIN`].
pub const END: &str = "<!-- queries:end -->";

/// What to run.
pub struct QueriesArgs {
    pub bootstrap: String,
    pub keys: u64,
    pub partitions: i32,
    pub seconds: u64,
    pub clients: usize,
    pub gets: usize,
    pub work_dir: PathBuf,
    pub out: PathBuf,
    pub command: String,
}

/// Latencies of one measured phase.
struct Phase {
    requests: usize,
    errors: usize,
    elapsed: Duration,
    sorted: Vec<Duration>,
}

impl Phase {
    fn new(mut latencies: Vec<Duration>, errors: usize, elapsed: Duration) -> Self {
        latencies.sort();
        Phase {
            requests: latencies.len(),
            errors,
            elapsed,
            sorted: latencies,
        }
    }

    fn pct(&self, q: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        self.sorted[((self.sorted.len() - 1) as f64 * q).round() as usize]
    }

    fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

fn instance(
    a: &QueriesArgs,
    app_id: &str,
    input: &str,
    output: &str,
    n: usize,
) -> Result<KafkaStreams> {
    let topology = crate::topologies::build("count", input, output, "")?;
    let state = a.work_dir.join(format!("state-{n}"));
    let _ = std::fs::remove_dir_all(&state);
    let config = StreamsConfig::from_pairs([
        ("application_id", app_id),
        ("bootstrap_servers", a.bootstrap.as_str()),
        ("state_dir", &state.display().to_string()),
        ("processing_guarantee", "exactly_once_v2"),
        ("http_bind", "127.0.0.1:0"),
    ])?;
    let mut app = KafkaStreams::new(topology, config)?;
    app.start()?;
    Ok(app)
}

/// One `GET path` over a fresh connection (the server closes each).
fn get(addr: SocketAddr, path: &str) -> Result<u16> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::with_capacity(512);
    stream.read_to_end(&mut response)?;
    let head = std::str::from_utf8(&response[..response.len().min(16)]).unwrap_or("");
    Ok(head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0))
}

/// `clients` threads asking `addr` for `keys` in turn for `seconds`.
fn http_phase(addr: SocketAddr, keys: &[String], clients: usize, seconds: u64) -> Phase {
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let results: Vec<(Vec<Duration>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    let (mut latencies, mut errors) = (Vec::new(), 0);
                    let mut i = c;
                    while Instant::now() < until {
                        let path = format!("/stores/counts/keys/{}", keys[i % keys.len()]);
                        let t = Instant::now();
                        match get(addr, &path) {
                            Ok(200) => latencies.push(t.elapsed()),
                            _ => errors += 1,
                        }
                        i += clients;
                    }
                    (latencies, errors)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let elapsed = started.elapsed();
    let errors = results.iter().map(|r| r.1).sum();
    Phase::new(
        results.into_iter().flat_map(|r| r.0).collect(),
        errors,
        elapsed,
    )
}

pub fn run(a: &QueriesArgs) -> Result<()> {
    std::fs::create_dir_all(&a.work_dir)?;
    let app_id = format!(
        "bench-queries-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let (input, output) = (format!("{app_id}-in"), format!("{app_id}-out"));
    create_topics(&a.bootstrap, &[&input, &output], a.partitions)?;
    let mut apps = vec![
        instance(a, &app_id, &input, &output, 0)?,
        instance(a, &app_id, &input, &output, 1)?,
    ];
    let p = producer(&a.bootstrap, "5")?;
    let keys: Vec<String> = (0..a.keys).map(|i| format!("k{i:07}")).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    for key in &keys {
        send(&p, &input, key.as_bytes(), b"v", now)?;
    }
    rdkafka::producer::Producer::flush(&p, Duration::from_secs(30))?;
    eprintln!(
        "queries: {} keys written; waiting for both instances to hold them",
        keys.len()
    );

    // Every key counted, the group settled, each instance answering.
    let counts = apps[0]
        .key_value_store::<String, i64>("counts")
        .context("the count workload's store")?;
    let counts_b = apps[1].key_value_store::<String, i64>("counts")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let (local, remote) = loop {
        let ready = apps.iter().all(|app| app.state() == AppState::Running);
        let (mine, _) = counts.tasks().unwrap_or_default();
        let (theirs, _) = counts_b.tasks().unwrap_or_default();
        let both = !mine.is_empty() && !theirs.is_empty();
        if ready && both && mine.len() + theirs.len() == a.partitions as usize {
            let held = counts.all().map(|e| e.len()).unwrap_or(0)
                + counts_b.all().map(|e| e.len()).unwrap_or(0);
            if held == keys.len() {
                let (mut local, mut remote) = (Vec::new(), Vec::new());
                for key in &keys {
                    let task = counts.task_of(key)?.expect("started");
                    if mine.contains(&task) {
                        local.push(key.clone());
                    } else {
                        remote.push(key.clone());
                    }
                }
                break (local, remote);
            }
        }
        if Instant::now() > deadline {
            bail!("the two instances did not settle with every key counted");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if remote.is_empty() {
        bail!("instance B runs no task of the store; nothing to forward");
    }
    eprintln!(
        "queries: {} keys on instance A, {} on instance B",
        local.len(),
        remote.len()
    );

    // Local get latency, one at a time.
    let mut latencies = Vec::with_capacity(a.gets);
    let started = Instant::now();
    for i in 0..a.gets {
        let key = &local[i % local.len()];
        let t = Instant::now();
        let value = counts.get(key)?;
        latencies.push(t.elapsed());
        if value != Some(1) {
            bail!("{key}: expected a count of 1, got {value:?}");
        }
    }
    let library = Phase::new(latencies, 0, started.elapsed());

    let addr = apps[0].http_addr().context("instance A serves HTTP")?;
    // Warm the routing cache and the connections' code paths.
    let _ = http_phase(addr, &remote, 1, 1);
    let local_hits = http_phase(addr, &local, a.clients, a.seconds);
    let forwarded = http_phase(addr, &remote, a.clients, a.seconds);

    for app in &mut apps {
        app.close(Duration::from_secs(30));
    }
    let _ = delete_topics(&a.bootstrap, &[&input, &output], &app_id);

    let section = section(a, &library, &local_hits, &forwarded)?;
    println!("{section}");
    crate::sections::write(&a.out, (BEGIN, END), &section)
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn section(a: &QueriesArgs, library: &Phase, local: &Phase, forwarded: &Phase) -> Result<String> {
    let mut s = String::new();
    writeln!(s, "{BEGIN}")?;
    writeln!(s, "## Interactive queries")?;
    writeln!(s)?;
    writeln!(
        s,
        "Regenerate: `{}`. Two instances of the `count` workload in one process (exactly-once, {} partitions), \
         one count per key for {} keys; {}. Loopback HTTP, one connection per request (the server closes it); \
         the clients run on the same two cores as both instances and the broker.",
        a.command,
        a.partitions,
        a.keys,
        crate::dcmon::build_description()
    )?;
    writeln!(s)?;
    writeln!(
        s,
        "| path | requests | errors | per second | p50 µs | p99 µs | max µs |"
    )?;
    writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")?;
    for (name, p) in [
        (
            "library `KeyValueQuery::get`, local task, one at a time",
            library,
        ),
        (&*format!("HTTP, local hit, {} clients", a.clients), local),
        (
            &*format!("HTTP, forwarded to the owner, {} clients", a.clients),
            forwarded,
        ),
    ] {
        writeln!(
            s,
            "| {name} | {} | {} | {:.0} | {} | {} | {} |",
            p.requests,
            p.errors,
            p.per_second(),
            us(p.pct(0.5)),
            us(p.pct(0.99)),
            us(p.pct(1.0))
        )?;
    }
    writeln!(s)?;
    writeln!(
        s,
        "A query reads the stores of the stream thread that owns the key's task: directly, under the \
         thread's lock, while the thread waits for input (it polls without holding it) and its stores hold \
         committed state only; otherwise the thread answers between two rounds of its loop. A forwarded \
         request adds one HTTP round trip from instance A to B, where it is a local hit."
    )?;
    writeln!(s, "{END}")?;
    Ok(s)
}
