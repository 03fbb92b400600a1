//! The shipped `order-enrichment` topology's tables are queryable with no
//! extra code, on the real broker: two `weir run` instances; every
//! customer of the `customers` table (a KTable, partitioned: forwarded to
//! its owner when needed) and every product of the `products` global
//! table (every instance holds it all) answers with the record last
//! written for it, as JSON.

mod common;

use std::time::{Duration, Instant};

use common::counting::{serial, tail};
use common::weir_app::{WeirApp, get_json};
use serde_json::Value;
use weir::topologies::order_enrichment::{
    SAMPLE_CUSTOMERS, SAMPLE_PRODUCTS, sample_customer, sample_product,
};

fn json_records<T: serde::Serialize>(rows: &[(String, T)]) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    rows.iter()
        .map(|(k, v)| (Some(k.clone().into_bytes()), serde_json::to_vec(v).unwrap()))
        .collect()
}

#[test]
fn order_enrichment_tables_answer_as_json() {
    let _serial = serial();
    let app_id = common::unique_topic("query-enrich");
    let topic = |t: &str| format!("{app_id}-{t}");
    let (orders, customers, products, output) = (
        topic("orders"),
        topic("customers"),
        topic("products"),
        topic("enriched"),
    );
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(common::create_topics(&[
            (&orders, 4),
            (&customers, 4),
            (&products, 2),
            (&output, 4),
        ]));
    let customer_rows: Vec<_> = (0..SAMPLE_CUSTOMERS).map(sample_customer).collect();
    let product_rows: Vec<_> = (0..SAMPLE_PRODUCTS).map(sample_product).collect();
    common::produce_batch(&customers, &json_records(&customer_rows));
    common::produce_batch(&products, &json_records(&product_rows));
    let dir = tempfile::tempdir().unwrap();
    let start = |i: usize| {
        let settings = vec![
            format!("application_id={app_id}"),
            "processing_guarantee=exactly_once_v2".to_owned(),
            format!("topology.orders_topic={orders}"),
            format!("topology.customers_topic={customers}"),
            format!("topology.products_topic={products}"),
            format!("topology.output_topic={output}"),
        ];
        let state = dir.path().join(format!("instance-{i}"));
        let log = dir.path().join(format!("instance-{i}.log"));
        WeirApp::start("order-enrichment", &state, &log, &settings)
    };
    let mut apps = vec![start(0), start(1)];

    let (status, stores) = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if apps[0].http_addr().is_some() {
                break get_json(apps[0].http_addr().unwrap(), "/stores");
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    assert_eq!(status, 200);
    let kinds: Vec<(String, String)> = stores["stores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().into(),
                s["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        kinds.contains(&("customers".into(), "key-value".into())),
        "{stores}"
    );
    assert!(
        kinds.contains(&("products".into(), "global key-value".into())),
        "{stores}"
    );

    // Every customer and product, from either instance, once loaded.
    let deadline = Instant::now() + Duration::from_secs(120);
    for (i, app) in apps.iter_mut().enumerate() {
        for (id, customer) in &customer_rows {
            let expected = serde_json::to_value(customer).unwrap();
            loop {
                assert!(app.is_running(), "{}", tail(&app.log_text()));
                let (status, answer) = get_json(
                    app.http_addr().unwrap(),
                    &format!("/stores/customers/keys/{id}"),
                );
                if status == 200 && answer["value"] == expected {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "instance {i}, customer {id}: {status} {answer}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        for (id, product) in &product_rows {
            let (status, answer) = get_json(
                app.http_addr().unwrap(),
                &format!("/stores/products/keys/{id}"),
            );
            assert_eq!(status, 200, "instance {i}, product {id}: {answer}");
            assert_eq!(answer["value"], serde_json::to_value(product).unwrap());
            assert_eq!(answer["global"], Value::Bool(true));
        }
        let (status, range) = get_json(app.http_addr().unwrap(), "/stores/products/range");
        assert_eq!(status, 200);
        assert_eq!(
            range["entries"].as_array().unwrap().len(),
            product_rows.len()
        );
        let (status, range) = get_json(app.http_addr().unwrap(), "/stores/customers/range");
        assert_eq!(status, 200, "{range}");
        assert_eq!(
            range["entries"].as_array().unwrap().len(),
            customer_rows.len()
        );
    }
    for app in &mut apps {
        assert_eq!(app.stop(), Some(0));
    }
}
