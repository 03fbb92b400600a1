//! Co-partitioning of joins, checked by the runtime's start-up plan
//! (`weir::runtime::topics::plan`, no broker needed): a join's topics must
//! have equal partition counts, and a repartition topic inserted before a
//! join gets the partition count of the other side.

use std::collections::HashMap;

use weir::runtime::StreamsError;
use weir::runtime::topics::plan;
use weir::topology::{Consumed, Joined, Materialized, Produced, StreamsBuilder, Topology};

fn join(rekey: bool) -> Topology {
    let builder = StreamsBuilder::new();
    let customers =
        builder.table::<String, String>("customers", Consumed::new(), Materialized::as_("c"));
    let mut orders = builder.stream::<String, String>("orders", Consumed::new());
    if rekey {
        orders = orders.select_key(|_, v: &String| v.clone());
    }
    orders
        .join_table(
            &customers,
            |o: &String, c: &String| format!("{o}/{c}"),
            Joined::as_("by-customer"),
        )
        .to("out", Produced::new());
    builder.build().unwrap()
}

fn counts(orders: i32, customers: i32) -> HashMap<String, i32> {
    HashMap::from([
        ("orders".to_owned(), orders),
        ("customers".to_owned(), customers),
    ])
}

#[test]
fn joined_topics_with_different_partition_counts_are_refused() {
    let err = plan(&join(false), "app", &counts(4, 3)).unwrap_err();
    match &err {
        StreamsError::NotCopartitioned { topics, counts } => {
            assert_eq!(topics, &vec!["customers".to_owned(), "orders".to_owned()]);
            assert_eq!(counts, &vec![3, 4]);
        }
        other => panic!("expected NotCopartitioned, got {other}"),
    }
    assert!(
        err.to_string().contains("give them equal partition counts"),
        "{err}"
    );
    assert!(plan(&join(false), "app", &counts(4, 4)).is_ok());
}

#[test]
fn a_repartition_topic_before_a_join_is_co_partitioned_with_the_table() {
    let layout = plan(&join(true), "app", &counts(6, 4)).unwrap();
    assert_eq!(
        layout.repartition_topics,
        vec!["app-by-customer-repartition".to_owned()]
    );
    assert_eq!(layout.partitions["app-by-customer-repartition"], 4);
    // Sub-topology 0 (customers + the join) has 4 tasks, 1 (orders → re-key) 6.
    assert_eq!(layout.tasks_per_subtopology, vec![4, 6]);
    assert_eq!(layout.partitions["app-c-changelog"], 4);
}
