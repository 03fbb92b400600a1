//! Joins on the real broker: the shipped `order-enrichment` topology (orders
//! re-keyed through a repartition topic, left-joined with a customers
//! KTable and a products GlobalKTable) in 2 `weir run` processes under
//! exactly_once_v2, with one of them SIGKILLed and restarted mid-run. Every
//! order must appear exactly once with the fields an independent
//! computation gives.
//!
//! A second test runs a windowed stream–stream join and a foreign-key join
//! in one in-process instance (RocksDB stores, internal topics created at
//! start-up, the two foreign-key sides on differently partitioned topics).
//!
//! Semantics asserted: the tables are produced first; the products global
//! table is loaded in full before processing starts (by design); the test
//! waits until every customer is in the customers store's committed
//! changelog before producing orders, so each order sees its customer.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::weir_app::WeirApp;
use weir::topologies::order_enrichment::{
    Customer, EnrichedOrder, Order, Product, SAMPLE_CUSTOMERS, SAMPLE_PRODUCTS, sample_customer,
    sample_order, sample_product,
};

struct Fixture {
    app_id: String,
    orders: String,
    customers: String,
    products: String,
    output: String,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let app_id = common::unique_topic("enrich");
        let f = Fixture {
            orders: format!("{app_id}-orders"),
            customers: format!("{app_id}-customers"),
            products: format!("{app_id}-products"),
            output: format!("{app_id}-enriched"),
            app_id,
            dir: tempfile::tempdir().unwrap(),
        };
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(common::create_topics(&[
            (&f.orders, 4),
            (&f.customers, 4),
            (&f.products, 2),
            (&f.output, 4),
        ]));
        f
    }

    fn start(&self, instance: usize) -> WeirApp {
        let state = self.dir.path().join(format!("instance-{instance}"));
        let log = self.dir.path().join(format!("instance-{instance}.log"));
        let settings = vec![
            format!("application_id={}", self.app_id),
            "processing_guarantee=exactly_once_v2".to_owned(),
            format!("topology.orders_topic={}", self.orders),
            format!("topology.customers_topic={}", self.customers),
            format!("topology.products_topic={}", self.products),
            format!("topology.output_topic={}", self.output),
        ];
        WeirApp::start("order-enrichment", &state, &log, &settings)
    }
}

/// Writes sample orders `from..to` to `topic`.
fn produce_orders(topic: &str, from: u64, to: u64) {
    let records: Vec<_> = (from..to)
        .map(|i| {
            let o = sample_order(i);
            (
                Some(o.order_id.clone().into_bytes()),
                serde_json::to_vec(&o).unwrap(),
            )
        })
        .collect();
    common::produce_batch(topic, &records);
}

fn json_records<T: serde::Serialize>(rows: &[(String, T)]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    rows.iter()
        .map(|(k, v)| (Some(k.clone().into_bytes()), serde_json::to_vec(v).unwrap()))
        .collect()
}

/// Whether `topic` exists with at least one partition.
fn topic_exists(topic: &str) -> bool {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = common::base_config().create().expect("metadata client");
    consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .is_ok_and(|m| {
            m.topics()
                .iter()
                .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        })
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Every committed output record as (order id, enriched order), in read order.
fn read_output(topic: &str) -> Vec<(String, EnrichedOrder)> {
    common::read_to_end(topic)
        .into_iter()
        .map(|r| {
            let key = String::from_utf8(r.key.expect("output keys are order ids")).unwrap();
            let value = serde_json::from_slice(&r.value.expect("no tombstones")).unwrap();
            (key, value)
        })
        .collect()
}

/// Polls until `done` holds for the committed records of `topic`, checking the apps live.
fn wait_until(
    what: &str,
    topic: &str,
    timeout: Duration,
    apps: &mut [&mut WeirApp],
    done: impl Fn(usize) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let n = common::read_to_end(topic).len();
        if done(n) {
            return;
        }
        for app in apps.iter_mut() {
            assert!(
                app.is_running(),
                "an instance exited early; log {}:\n{}",
                app.log.display(),
                tail(&app.log_text())
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {timeout:?} ({n} records in {topic})"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Both tests load the 2 shared cores; they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn two_instances_enrich_every_order_exactly_once_across_a_sigkill() {
    let _serial = serial();
    let f = Fixture::new();
    let n: u64 = 10_000;
    let customers: BTreeMap<String, Customer> =
        (0..SAMPLE_CUSTOMERS).map(sample_customer).collect();
    let products: BTreeMap<String, Product> = (0..SAMPLE_PRODUCTS).map(sample_product).collect();
    let customer_rows: Vec<_> = customers.clone().into_iter().collect();
    let product_rows: Vec<_> = products.clone().into_iter().collect();
    common::produce_batch(&f.customers, &json_records(&customer_rows));
    common::produce_batch(&f.products, &json_records(&product_rows));

    let mut a = f.start(0);
    let mut b = f.start(1);
    let changelog = format!("{}-customers-changelog", f.app_id);
    let started = Instant::now();
    // Topics are created by the instances; wait for them, then for every customer.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if topic_exists(&changelog) && common::read_to_end(&changelog).len() >= customers.len() {
            break;
        }
        assert!(
            a.is_running() && b.is_running(),
            "an instance exited early:\n{}\n{}",
            tail(&a.log_text()),
            tail(&b.log_text())
        );
        assert!(
            Instant::now() < deadline,
            "customers not loaded within 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("customers loaded after {:?}", started.elapsed());

    // Orders flow for several seconds while instance 1 is killed and restarted.
    let producing = {
        let topic = f.orders.clone();
        std::thread::spawn(move || {
            for chunk in 0..20 {
                produce_orders(&topic, chunk * (n / 20), (chunk + 1) * (n / 20));
                std::thread::sleep(Duration::from_millis(400));
            }
        })
    };
    wait_until(
        "first outputs",
        &f.output,
        Duration::from_secs(180),
        &mut [&mut a, &mut b],
        |c| c >= (n / 10) as usize,
    );
    b.kill();
    let at_kill = common::read_to_end(&f.output).len();
    println!("SIGKILLed instance 1 with {at_kill} of {n} outputs committed");
    let mut b = f.start(1);
    producing.join().expect("the producer thread");
    wait_until(
        "all outputs",
        &f.output,
        Duration::from_secs(300),
        &mut [&mut a, &mut b],
        |c| c >= n as usize,
    );
    assert!(
        (at_kill as u64) < n,
        "the kill happened mid-run ({at_kill} of {n} outputs committed)"
    );
    // Give a duplicate (if there were one) time to be committed.
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "{n} orders enriched by 2 instances (one killed) in {:?}",
        started.elapsed()
    );
    let output = read_output(&f.output);
    let mut seen: BTreeMap<String, EnrichedOrder> = BTreeMap::new();
    for (key, enriched) in &output {
        assert!(
            seen.insert(key.clone(), enriched.clone()).is_none(),
            "order {key} appears more than once"
        );
    }
    assert_eq!(output.len() as u64, n, "exactly one output per order");
    for i in 0..n {
        let order = sample_order(i);
        let expected = EnrichedOrder::of(
            &order,
            customers.get(&order.customer_id),
            products.get(&order.product_id),
        );
        assert!(expected.customer_name.is_some() && expected.product_name.is_some());
        assert_eq!(
            seen.get(&order.order_id),
            Some(&expected),
            "order {}",
            order.order_id
        );
    }

    // The global table stays current while running: after a product update,
    // later orders (eventually) see it; every order still appears once.
    let old = products["p0"].clone();
    let renamed = Product {
        name: "product-0-renamed".to_owned(),
        price_cents: 999,
    };
    common::produce_batch(
        &f.products,
        &json_records(&[("p0".to_owned(), renamed.clone())]),
    );
    let extra = |j: u64| Order {
        order_id: format!("x{j}"),
        customer_id: "c1".to_owned(),
        product_id: "p0".to_owned(),
        quantity: 2,
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut produced = 0;
    loop {
        let batch: Vec<_> = (produced..produced + 10)
            .map(|j| {
                let o = extra(j);
                (
                    Some(o.order_id.clone().into_bytes()),
                    serde_json::to_vec(&o).unwrap(),
                )
            })
            .collect();
        common::produce_batch(&f.orders, &batch);
        produced += 10;
        std::thread::sleep(Duration::from_secs(1));
        let renamed_seen = read_output(&f.output)
            .iter()
            .any(|(_, e)| e.product_name.as_deref() == Some(renamed.name.as_str()));
        if renamed_seen {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no order saw the product update within 120 s"
        );
    }
    wait_until(
        "the extra outputs",
        &f.output,
        Duration::from_secs(120),
        &mut [&mut a, &mut b],
        |c| c >= (n + produced) as usize,
    );
    std::thread::sleep(Duration::from_secs(3));
    for app in [&mut a, &mut b] {
        let log = tail(&app.log_text());
        assert_eq!(app.stop(), Some(0), "graceful stop exits 0; log:\n{log}");
    }
    let output = read_output(&f.output);
    assert_eq!(
        output.len() as u64,
        n + produced,
        "exactly one output per order"
    );
    let mut renamed_count = 0;
    for (key, enriched) in output.iter().filter(|(k, _)| k.starts_with('x')) {
        let j: u64 = key[1..].parse().unwrap();
        let order = extra(j);
        let customer = customers.get("c1");
        if *enriched == EnrichedOrder::of(&order, customer, Some(&renamed)) {
            renamed_count += 1;
        } else {
            assert_eq!(*enriched, EnrichedOrder::of(&order, customer, Some(&old)));
        }
    }
    println!("product update: {renamed_count} of {produced} later orders saw it");
    let globals_logged = a.log_text().contains("global tables loaded");
    assert!(globals_logged, "the global thread logs its load");
}

fn latest(topic: &str) -> BTreeMap<String, Option<String>> {
    common::latest_per_key(topic)
        .into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8(k).unwrap(),
                v.map(|v| String::from_utf8(v).unwrap()),
            )
        })
        .collect()
}

fn text_records(rows: &[(String, String)]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    rows.iter()
        .map(|(k, v)| (Some(k.clone().into_bytes()), v.clone().into_bytes()))
        .collect()
}

/// Polls `check` once a second until it holds or `timeout` passes.
fn eventually(what: &str, timeout: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {timeout:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn windowed_and_foreign_key_joins_run_on_the_broker() {
    use weir::serdes::{OptionSerde, StringSerde};
    use weir::topology::{Consumed, JoinWindows, Joined, Materialized, Produced, StreamsBuilder};

    let _serial = serial();
    let app_id = common::unique_topic("joins-rt");
    let t = |name: &str| format!("{app_id}-{name}");
    let (left, right, orders, customers) = (t("left"), t("right"), t("orders"), t("customers"));
    let (pairs_out, fk_out) = (t("pairs"), t("fk"));
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[
            (&left, 2),
            (&right, 2),
            (&orders, 2),
            (&customers, 3),
            (&pairs_out, 2),
            (&fk_out, 2),
        ]));

    let builder = StreamsBuilder::new();
    let l = builder.stream::<String, String>(&left, Consumed::new());
    let r = builder.stream::<String, String>(&right, Consumed::new());
    let window = Duration::from_secs(60);
    l.join_stream(
        &r,
        |a: &String, b: &String| format!("{a}+{b}"),
        JoinWindows::of_time_difference_and_grace(window, window),
        Joined::as_("pairs"),
    )
    .to(&pairs_out, Produced::new());
    let order_table =
        builder.table::<String, String>(&orders, Consumed::new(), Materialized::as_("orders"));
    let customer_table = builder.table::<String, String>(
        &customers,
        Consumed::new(),
        Materialized::as_("customers"),
    );
    order_table
        .named("fk")
        .join_on_foreign_key(
            &customer_table,
            |o: &String| o.split(':').next().unwrap_or_default().to_owned(),
            |o: &String, c: &String| format!("{o}@{c}"),
        )
        .to_stream()
        .to(
            &fk_out,
            Produced::with(StringSerde, OptionSerde::new(StringSerde)),
        );

    let customer_rows: Vec<(String, String)> = (0..5)
        .map(|i| (format!("c{i}"), format!("name{i}")))
        .collect();
    let order_rows: Vec<(String, String)> = (0..50)
        .map(|i| (format!("o{i}"), format!("c{}:item{i}", i % 5)))
        .collect();
    common::produce_batch(&customers, &text_records(&customer_rows));
    common::produce_batch(&orders, &text_records(&order_rows));
    let lefts: Vec<_> = (0..100)
        .map(|i| (format!("k{i}"), format!("L{i}")))
        .collect();
    let rights: Vec<_> = (0..100)
        .map(|i| (format!("k{i}"), format!("R{i}")))
        .collect();
    common::produce_batch(&left, &text_records(&lefts));
    common::produce_batch(&right, &text_records(&rights));

    let dir = tempfile::tempdir().unwrap();
    let mut config = weir::config::StreamsConfig::new(&app_id, common::bootstrap());
    config.state_dir = dir.path().to_path_buf();
    config.processing_guarantee = weir::config::ProcessingGuarantee::ExactlyOnceV2;
    let mut app = weir::runtime::KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().expect("the joins app starts");

    let expected_fk = |rename: bool| -> BTreeMap<String, Option<String>> {
        (0..50)
            .map(|i| {
                let (c, item) = match (rename, i) {
                    (true, 1) => (0, "moved".to_owned()),
                    _ => (i % 5, format!("item{i}")),
                };
                let name = if rename && c == 0 {
                    "renamed".to_owned()
                } else {
                    format!("name{c}")
                };
                (format!("o{i}"), Some(format!("c{c}:{item}@{name}")))
            })
            .collect()
    };
    eventually("every order joined", Duration::from_secs(120), || {
        latest(&fk_out) == expected_fk(false)
    });
    // A right-side update and a foreign-key change (o1: c1 → c0).
    common::produce_batch(
        &customers,
        &text_records(&[("c0".to_owned(), "renamed".to_owned())]),
    );
    common::produce_batch(
        &orders,
        &text_records(&[("o1".to_owned(), "c0:moved".to_owned())]),
    );
    eventually("updates propagated", Duration::from_secs(120), || {
        latest(&fk_out) == expected_fk(true)
    });
    eventually("every pair joined", Duration::from_secs(120), || {
        common::read_to_end(&pairs_out).len() >= 100
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(app.close(Duration::from_secs(60)), "the app stops");

    let pairs: Vec<(String, String)> = common::read_to_end(&pairs_out)
        .into_iter()
        .map(|r| {
            (
                String::from_utf8(r.key.unwrap()).unwrap(),
                String::from_utf8(r.value.unwrap()).unwrap(),
            )
        })
        .collect();
    let mut sorted = pairs.clone();
    sorted.sort();
    let mut expected: Vec<(String, String)> = (0..100)
        .map(|i| (format!("k{i}"), format!("L{i}+R{i}")))
        .collect();
    expected.sort();
    assert_eq!(sorted, expected, "each pair joined exactly once");
    let fk_records = common::read_to_end(&fk_out).len();
    println!(
        "windowed join: {} results; foreign-key join: {fk_records} result records for 50 orders and 2 updates",
        pairs.len()
    );
}

/// A stream–table join started on topics written before it: every order
/// must meet its customer, though the customers partition holds several
/// fetches' worth of rows before the orders' timestamps. The task takes
/// the side with the smaller timestamp first, and when the customers queue
/// runs empty while the consumer knows of rows still to fetch, it waits
/// for them (as Kafka Streams waits for a partition whose lag is not zero)
/// instead of joining the orders against a table read only in part.
#[test]
fn a_stream_table_join_of_preloaded_topics_waits_for_the_table_rows() {
    use weir::topology::{Consumed, Joined, Materialized, Produced, StreamsBuilder};

    const CUSTOMERS: usize = 30_000;
    const ORDERS: usize = 3_000;
    let _serial = serial();
    let app_id = common::unique_topic("preloaded-join");
    let (orders, customers, out) = (
        format!("{app_id}-orders"),
        format!("{app_id}-customers"),
        format!("{app_id}-out"),
    );
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[
            (&orders, 2),
            (&customers, 2),
            (&out, 2),
        ]));
    // ~400 bytes a row: about 6 MB per partition, several 1 MiB fetches.
    let pad = "x".repeat(380);
    let customer_rows: Vec<(String, String)> = (0..CUSTOMERS)
        .map(|i| (format!("c{i}"), format!("name{i}-{pad}")))
        .collect();
    common::produce_batch(&customers, &text_records(&customer_rows));
    // Orders for customers all over the table, written after every row.
    let order_rows: Vec<(String, String)> = (0..ORDERS)
        .map(|i| {
            (
                format!("c{}", i * (CUSTOMERS / ORDERS)),
                format!("order{i}"),
            )
        })
        .collect();
    common::produce_batch(&orders, &text_records(&order_rows));

    let builder = StreamsBuilder::new();
    let table = builder.table::<String, String>(
        &customers,
        Consumed::new(),
        Materialized::as_("customers"),
    );
    builder
        .stream::<String, String>(&orders, Consumed::new())
        .join_table(
            &table,
            |order: &String, name: &String| {
                format!("{order}@{}", &name[..name.find('-').unwrap_or(name.len())])
            },
            Joined::new(),
        )
        .to(&out, Produced::new());
    let dir = tempfile::tempdir().unwrap();
    let mut config = weir::config::StreamsConfig::new(&app_id, common::bootstrap());
    config.state_dir = dir.path().to_path_buf();
    config.processing_guarantee = weir::config::ProcessingGuarantee::ExactlyOnceV2;
    let mut app = weir::runtime::KafkaStreams::new(builder.build().unwrap(), config).unwrap();
    app.start().expect("the join app starts");

    // Done once every order's input offset is committed (the output of a
    // committed transaction is visible with it).
    let committed_all = || {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = common::base_config()
            .set("group.id", &app_id)
            .create()
            .expect("offsets client");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition(&orders, p);
        }
        let Ok(committed) = c.committed_offsets(tpl, Duration::from_secs(10)) else {
            return false;
        };
        committed.elements().iter().all(|e| {
            let (_, high) = c
                .fetch_watermarks(&orders, e.partition(), Duration::from_secs(10))
                .unwrap_or((0, i64::MAX));
            matches!(e.offset(), rdkafka::Offset::Offset(o) if o >= high)
        })
    };
    eventually(
        "every order's offset committed",
        Duration::from_secs(120),
        committed_all,
    );
    // With the input quiet, the thread waits in its poll (`poll_ms`)
    // between rounds. A task whose wait for the table's fetch had ended
    // without table records once counted as waiting for good, and its
    // thread then polled with a zero timeout: a busy loop of hundreds of
    // thousands of rounds a second, until the table partition got a row.
    let polls = || {
        common::weir_app::metric_in(&app.metrics().encode_text(), "weir_thread_polls_total", &[])
    };
    let before = polls();
    std::thread::sleep(Duration::from_secs(2));
    let quiet_rounds = polls() - before;
    assert!(
        quiet_rounds < 1_000.0,
        "{quiet_rounds} poll rounds in 2 s of quiet input: the stream thread polls without waiting"
    );
    assert!(app.close(Duration::from_secs(60)), "the app stops");
    let mut joined: Vec<(String, String)> = common::read_to_end(&out)
        .into_iter()
        .map(|r| {
            (
                String::from_utf8(r.key.unwrap()).unwrap(),
                String::from_utf8(r.value.unwrap()).unwrap(),
            )
        })
        .collect();
    joined.sort();
    let mut expected: Vec<(String, String)> = (0..ORDERS)
        .map(|i| {
            let c = i * (CUSTOMERS / ORDERS);
            (format!("c{c}"), format!("order{i}@name{c}"))
        })
        .collect();
    expected.sort();
    let missing = expected.iter().filter(|e| !joined.contains(e)).count();
    assert_eq!(
        missing, 0,
        "{missing} of {ORDERS} orders were joined before their customer was read (and dropped)"
    );
    assert_eq!(joined, expected, "every order joined exactly once");
}
