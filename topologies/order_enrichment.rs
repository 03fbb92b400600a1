//! `order-enrichment`: orders joined with a customers table and a products
//! global table.
//!
//! * reads `orders` (key: order id, UTF-8; value: JSON [`Order`]),
//!   `customers` (key: customer id; value: JSON [`Customer`], null deletes)
//!   and `products` (key: product id; value: JSON [`Product`], null deletes);
//! * re-keys each order by its customer id — a key change, so the orders go
//!   through the repartition topic `<application_id>-orders-by-customer-repartition`
//!   and meet their customer in the same task (co-partitioned with `customers`);
//! * left-joins the customers table (store `customers`, changelog
//!   `<application_id>-customers-changelog`), then left-joins the products
//!   global table (store `products`, loaded in full by every instance);
//! * writes one [`EnrichedOrder`] per order to `enriched-orders` (key: the
//!   order id). A customer or product that is not loaded yet when the order
//!   is processed gives `null` fields (left joins): produce tables first.
//!
//! `weir generate order-enrichment` creates the topics and writes sample
//! *orders* only; write the tables with [`sample_customer`] and
//! [`sample_product`] (as `tests/runtime_joins.rs` does) before the orders.

use serde::{Deserialize, Serialize};

use super::{Param, Params, ShippedTopology};
use crate::serdes::{JsonSerde, StringSerde};
use crate::topology::{
    Consumed, Joined, Materialized, Produced, StreamsBuilder, Topology, TopologyError,
};

/// An order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The order id (also the record key).
    pub order_id: String,
    /// Who ordered.
    pub customer_id: String,
    /// What was ordered.
    pub product_id: String,
    /// How many.
    pub quantity: u32,
}

/// A customer row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Customer {
    /// Display name.
    pub name: String,
    /// City.
    pub city: String,
}

/// A product row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// Display name.
    pub name: String,
    /// Unit price in cents.
    pub price_cents: u64,
}

/// The output: an order with its customer's and product's fields (`None`
/// when the row was not known when the order was processed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrichedOrder {
    /// The order.
    pub order: Order,
    /// The customer's name.
    pub customer_name: Option<String>,
    /// The customer's city.
    pub customer_city: Option<String>,
    /// The product's name.
    pub product_name: Option<String>,
    /// `quantity × price_cents`.
    pub total_cents: Option<u64>,
}

impl EnrichedOrder {
    /// Joins `order` with its rows: the definition the topology implements.
    pub fn of(order: &Order, customer: Option<&Customer>, product: Option<&Product>) -> Self {
        EnrichedOrder {
            order: order.clone(),
            customer_name: customer.map(|c| c.name.clone()),
            customer_city: customer.map(|c| c.city.clone()),
            product_name: product.map(|p| p.name.clone()),
            total_cents: product.map(|p| p.price_cents * u64::from(order.quantity)),
        }
    }
}

/// The registry entry.
pub const ORDER_ENRICHMENT: ShippedTopology = ShippedTopology {
    name: "order-enrichment",
    description: "enriches orders with their customer (KTable) and product (GlobalKTable); one output per order in enriched-orders",
    params: &[
        Param {
            name: "orders_topic",
            default: "orders",
            doc: "orders (key: order id, value: JSON order)",
        },
        Param {
            name: "customers_topic",
            default: "customers",
            doc: "customers (key: customer id, value: JSON customer or null); co-partitioned with the orders repartition topic",
        },
        Param {
            name: "products_topic",
            default: "products",
            doc: "products (key: product id, value: JSON product or null); any partition count",
        },
        Param {
            name: "output_topic",
            default: "enriched-orders",
            doc: "enriched orders (key: order id, value: JSON)",
        },
    ],
    input_params: &["orders_topic", "customers_topic", "products_topic"],
    output_params: &["output_topic"],
    build,
    sample,
    dataset: None,
};

/// Builds the order-enrichment topology.
///
/// ```
/// let t = weir::topologies::find("order-enrichment").unwrap();
/// let topology = weir::topologies::order_enrichment::build(&t.params(&Default::default()).unwrap()).unwrap();
/// assert_eq!(topology.subtopology_count(), 2); // orders → repartition → join task
/// ```
pub fn build(params: &Params) -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new();
    let customers = builder.table::<String, Customer>(
        params.get("customers_topic"),
        Consumed::with(StringSerde, JsonSerde::new()),
        Materialized::as_("customers"),
    );
    let products = builder.global_table::<String, Product>(
        params.get("products_topic"),
        Consumed::with(StringSerde, JsonSerde::new()),
        Materialized::as_("products"),
    );
    builder
        .stream::<String, Order>(
            params.get("orders_topic"),
            Consumed::with(StringSerde, JsonSerde::new()),
        )
        .select_key(|_, o: &Order| o.customer_id.clone())
        .left_join_table(
            &customers,
            |o: &Order, c: Option<&Customer>| (o.clone(), c.cloned()),
            Joined::as_("orders-by-customer")
                .with_key_serde(StringSerde)
                .with_value_serde(JsonSerde::new()),
        )
        .left_join_global(
            &products,
            |_, (o, _): &(Order, Option<Customer>)| o.product_id.clone(),
            |(o, c): &(Order, Option<Customer>), p: Option<&Product>| {
                EnrichedOrder::of(o, c.as_ref(), p)
            },
        )
        .map(|_, e: EnrichedOrder| (e.order.order_id.clone(), e))
        .to(
            params.get("output_topic"),
            Produced::with(StringSerde, JsonSerde::new()),
        );
    builder.build()
}

/// Customers in the sample data (`c0`…).
pub const SAMPLE_CUSTOMERS: u64 = 50;
/// Products in the sample data (`p0`…).
pub const SAMPLE_PRODUCTS: u64 = 20;

/// Sample customer `i` (key `c<i>`).
pub fn sample_customer(i: u64) -> (String, Customer) {
    const CITIES: &[&str] = &["Lyon", "Porto", "Graz", "Turku", "Ghent"];
    (
        format!("c{i}"),
        Customer {
            name: format!("customer-{i}"),
            city: CITIES[(i % CITIES.len() as u64) as usize].to_owned(),
        },
    )
}

/// Sample product `i` (key `p<i>`).
pub fn sample_product(i: u64) -> (String, Product) {
    (
        format!("p{i}"),
        Product {
            name: format!("product-{i}"),
            price_cents: 100 + 37 * i,
        },
    )
}

/// Sample order `i` (key `o<i>`): a deterministic customer, product and quantity.
pub fn sample_order(i: u64) -> Order {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    Order {
        order_id: format!("o{i}"),
        customer_id: format!("c{}", x % SAMPLE_CUSTOMERS),
        product_id: format!("p{}", (x / SAMPLE_CUSTOMERS) % SAMPLE_PRODUCTS),
        quantity: 1 + (x % 5) as u32,
    }
}

/// Sample input record `i` of the orders topic (what `weir generate` writes).
pub fn sample(i: u64) -> (Option<Vec<u8>>, Vec<u8>) {
    let order = sample_order(i);
    let value = serde_json::to_vec(&order).expect("an order serializes");
    (Some(order.order_id.into_bytes()), value)
}
