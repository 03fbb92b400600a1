"""The Python API through the in-memory TopologyTestDriver (no broker)."""

import json

import pytest

from weir import (
    JoinWindows,
    Serde,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    Topology,
    TopologyTestDriver,
)


def word_count_topology():
    builder = StreamsBuilder()
    (
        builder.stream("text", Serde.str(), Serde.str())
        .flat_map_values(lambda line: line.lower().split())
        .group_by(lambda _key, word: word, key_serde=Serde.str())
        .count(store="counts")
        .to_stream()
        .to("counts", value_serde=Serde.int())
    )
    return builder.build()


def test_word_count_counts_every_word():
    lines = ["the quick brown fox", "The lazy dog", "the fox"]
    truth = {}
    for line in lines:
        for word in line.lower().split():
            truth[word] = truth.get(word, 0) + 1

    with TopologyTestDriver(word_count_topology()) as driver:
        text = driver.create_input_topic("text", Serde.str(), Serde.str())
        counts = driver.create_output_topic("counts", Serde.str(), Serde.int())
        for i, line in enumerate(lines):
            text.pipe_input(None, line, timestamp=i)
        updates = counts.read_key_values_to_list()

    # Without a cache every update is emitted: one per word occurrence.
    assert len(updates) == sum(truth.values())
    assert dict(updates) == truth
    assert updates[:4] == [("the", 1), ("quick", 1), ("brown", 1), ("fox", 1)]


def test_the_count_is_written_as_a_kafka_long():
    with TopologyTestDriver(word_count_topology()) as driver:
        driver.create_input_topic("text", Serde.str(), Serde.str()).pipe_input(None, "a a")
        raw = driver.create_output_topic("counts", Serde.bytes(), Serde.bytes())
        assert raw.read_key_values_to_list() == [
            (b"a", (1).to_bytes(8, "big")),
            (b"a", (2).to_bytes(8, "big")),
        ]


def test_a_tumbling_window_with_grace_counts_per_window_and_drops_late_records():
    builder = StreamsBuilder()
    (
        builder.stream("clicks", Serde.str(), Serde.json())
        .group_by_key()
        .windowed_by(TimeWindows(size_ms=1000, grace_ms=500))
        .count()
        .to_stream()
        .map(lambda window, n: (f"{window[0]}@{window[1]}", n))
        .to("per-second", key_serde=Serde.str(), value_serde=Serde.int())
    )
    with TopologyTestDriver(builder.build()) as driver:
        clicks = driver.create_input_topic("clicks", Serde.str(), Serde.json())
        out = driver.create_output_topic("per-second", Serde.str(), Serde.int())
        clicks.pipe_input("ann", {"page": "/"}, timestamp=100)
        clicks.pipe_input("ann", {"page": "/a"}, timestamp=900)
        clicks.pipe_input("bob", {"page": "/"}, timestamp=1200)
        clicks.pipe_input("ann", {"page": "/b"}, timestamp=1300)  # within grace of [0,1000)
        clicks.pipe_input("ann", {"page": "/c"}, timestamp=800)
        clicks.pipe_input("bob", {"page": "/"}, timestamp=2600)  # closes [0,1000) (2600 > 1000+500... )
        clicks.pipe_input("ann", {"page": "/late"}, timestamp=700)  # late: dropped
        got = out.read_key_values_to_map()
    assert got == {"ann@0": 3, "bob@1000": 1, "ann@1000": 1, "bob@2000": 1}


def test_an_emit_final_window_emits_once_when_it_closes():
    builder = StreamsBuilder()
    (
        builder.stream("events", Serde.str(), Serde.str())
        .group_by_key()
        .windowed_by(TimeWindows(size_ms=1000, grace_ms=0, emit_final=True))
        .count()
        .to_stream()
        .to("final")
    )
    with TopologyTestDriver(builder.build()) as driver:
        events = driver.create_input_topic("events", Serde.str(), Serde.str())
        out = driver.create_output_topic("final", Serde.windowed(Serde.str(), 1000), Serde.int())
        for ts in (0, 10, 20):
            events.pipe_input("k", "x", timestamp=ts)
        assert out.read_key_values_to_list() == []
        events.pipe_input("k", "x", timestamp=1000)
        assert out.read_key_values_to_list() == [(("k", 0, 1000), 3)]


def test_a_stream_table_join_enriches_orders_and_a_left_join_keeps_unmatched():
    builder = StreamsBuilder()
    customers = builder.table("customers", Serde.str(), Serde.json())
    orders = builder.stream("orders", Serde.str(), Serde.json())
    orders.join(customers, lambda order, c: {**order, "name": c["name"]}).to("enriched")
    orders.left_join(customers, lambda order, c: {**order, "name": c and c["name"]}).to(
        "enriched-left"
    )
    with TopologyTestDriver(builder.build()) as driver:
        c = driver.create_input_topic("customers", Serde.str(), Serde.json())
        o = driver.create_input_topic("orders", Serde.str(), Serde.json())
        inner = driver.create_output_topic("enriched", Serde.str(), Serde.json())
        left = driver.create_output_topic("enriched-left", Serde.str(), Serde.json())
        c.pipe_input("c1", {"name": "Ann"}, timestamp=1)
        o.pipe_input("c1", {"amount": 5}, timestamp=2)
        o.pipe_input("c2", {"amount": 7}, timestamp=3)
        c.pipe_input("c1", None, timestamp=4)  # tombstone: Ann is gone
        o.pipe_input("c1", {"amount": 9}, timestamp=5)
        assert inner.read_key_values_to_list() == [("c1", {"amount": 5, "name": "Ann"})]
        assert left.read_key_values_to_list() == [
            ("c1", {"amount": 5, "name": "Ann"}),
            ("c2", {"amount": 7, "name": None}),
            ("c1", {"amount": 9, "name": None}),
        ]


def test_filter_map_select_key_branch_and_merge():
    builder = StreamsBuilder()
    numbers = builder.stream("numbers", Serde.str(), Serde.int())
    small, big = numbers.filter_not(lambda k, v: v < 0).branch(
        lambda k, v: v < 10, lambda k, v: v < 100
    )
    small.map_values(lambda v: v * 2).to("small", value_serde=Serde.int())
    big.select_key(lambda k, v: f"{k}!").map(lambda k, v: (k.upper(), str(v))).to(
        "big", key_serde=Serde.str(), value_serde=Serde.str()
    )
    small.merge(big).to("all")
    with TopologyTestDriver(builder.build()) as driver:
        inp = driver.create_input_topic("numbers", Serde.str(), Serde.int())
        inp.pipe_key_value_list([("a", 1), ("b", -3), ("c", 50), ("d", 500), ("e", 7)])
        assert driver.create_output_topic("small", Serde.str(), Serde.int()).read_key_values_to_list() == [
            ("a", 2),
            ("e", 14),
        ]
        assert driver.create_output_topic("big", Serde.str(), Serde.str()).read_key_values_to_list() == [
            ("C!", "50")
        ]
        assert [k for k, _ in driver.create_output_topic("all", Serde.str(), Serde.int()).read_key_values_to_list()] == [
            "a",
            "c",
            "e",
        ]


def test_an_exception_in_a_callable_fails_with_the_python_traceback():
    def explode(value):
        raise ValueError(f"cannot handle {value!r}")

    builder = StreamsBuilder()
    builder.stream("in", Serde.str(), Serde.str()).map_values(explode).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        with pytest.raises(RuntimeError) as failure:
            driver.create_input_topic("in", Serde.str(), Serde.str()).pipe_input("k", "boom")
    message = str(failure.value)
    assert "Traceback (most recent call last)" in message
    assert "in explode" in message
    assert "ValueError: cannot handle 'boom'" in message


def test_log_and_continue_skips_the_failing_record_and_dead_letter_keeps_it_with_the_reason():
    def parse(value):
        return int(value)

    def topology():
        builder = StreamsBuilder()
        builder.stream("in", Serde.str(), Serde.str()).map_values(parse).to(
            "out", value_serde=Serde.int()
        )
        return builder.build()

    with TopologyTestDriver(topology(), processing_handler="log_and_continue") as driver:
        inp = driver.create_input_topic("in", Serde.str(), Serde.str())
        for v in ("1", "x", "3"):
            inp.pipe_input("k", v)
        assert driver.create_output_topic("out", Serde.str(), Serde.int()).read_key_values_to_list() == [
            ("k", 1),
            ("k", 3),
        ]

    with TopologyTestDriver(topology(), processing_handler="dead_letter:in-dlq") as driver:
        inp = driver.create_input_topic("in", Serde.str(), Serde.str())
        for v in ("1", "x", "3"):
            inp.pipe_input("k", v)
        dlq = driver.create_output_topic("in-dlq", Serde.str(), Serde.str())
        [(key, value, _ts, headers)] = dlq.read_records_to_list()
        assert (key, value) == ("k", "x")
        reason = dict(headers)["__streams.errors.message"].decode()
        assert "Traceback (most recent call last)" in reason
        assert "in parse" in reason
        assert "ValueError: invalid literal for int()" in reason
        assert driver.create_output_topic("out", Serde.str(), Serde.int()).read_key_values_to_list() == [
            ("k", 1),
            ("k", 3),
        ]


def test_json_and_custom_serdes_round_trip_and_none_is_a_kafka_null():
    assert Serde.json().serialize({"a": [1, 2]}) == b'{"a":[1,2]}'
    assert Serde.json().deserialize(b'{"a":[1,2]}') == {"a": [1, 2]}
    assert Serde.int().serialize(-2) == (-2).to_bytes(8, "big", signed=True)
    assert Serde.int32().deserialize((7).to_bytes(4, "big")) == 7
    rev = Serde.custom(lambda s: s[::-1].encode(), lambda b: b.decode()[::-1])
    assert rev.serialize("abc") == b"cba"
    assert rev.deserialize(b"cba") == "abc"
    for serde in (Serde.str(), Serde.bytes(), Serde.int(), Serde.json(), rev):
        assert serde.serialize(None) is None
        assert serde.deserialize(None) is None
    with pytest.raises(ValueError, match="expected 8 bytes, got 3"):
        Serde.int().deserialize(b"abc")
    assert json.loads(Serde.json().serialize("x")) == "x"


def test_a_topology_runs_once_and_describes_itself():
    topology = word_count_topology()
    assert "counts" in topology.describe()
    TopologyTestDriver(topology).close()
    with pytest.raises(RuntimeError, match="already runs"):
        TopologyTestDriver(topology)


def test_reduce_and_aggregate_per_key_and_an_aggregator_exception_keeps_the_aggregate():
    def add(key, value, total):
        if value < 0:
            raise ValueError("negative")
        return total + value

    builder = StreamsBuilder()
    amounts = builder.stream("amounts", Serde.str(), Serde.int())
    amounts.group_by_key().reduce(max).to_stream().to("max", value_serde=Serde.int())
    amounts.group_by_key().aggregate(lambda: 0, add, value_serde=Serde.int()).to_stream().to(
        "sum", value_serde=Serde.int()
    )
    with TopologyTestDriver(builder.build(), processing_handler="log_and_continue") as driver:
        inp = driver.create_input_topic("amounts", Serde.str(), Serde.int())
        inp.pipe_key_value_list([("a", 3), ("a", 5), ("a", -1), ("a", 4), ("b", 2)])
        assert driver.create_output_topic("max", Serde.str(), Serde.int()).read_key_values_to_map() == {
            "a": 5,
            "b": 2,
        }
        sums = driver.create_output_topic("sum", Serde.str(), Serde.int()).read_key_values_to_list()
    # The reducer saw -1 (its branch comes first); the aggregator failed on
    # it and skipped the record: a's sum goes 3, 8, 12.
    assert sums == [("a", 3), ("a", 8), ("a", 12), ("b", 2)]


def test_hopping_sliding_and_session_windows():
    builder = StreamsBuilder()
    events = builder.stream("events", Serde.str(), Serde.str())
    grouped = events.group_by_key()
    grouped.windowed_by(TimeWindows(size_ms=10, advance_ms=5)).count().to_stream().to("hopping")
    grouped.windowed_by(SlidingWindows(time_difference_ms=10)).aggregate(
        lambda: "", lambda k, v, agg: agg + v, value_serde=Serde.str()
    ).to_stream().to("sliding")
    grouped.windowed_by(SessionWindows(inactivity_gap_ms=5)).count().to_stream().to("sessions")
    with TopologyTestDriver(builder.build()) as driver:
        inp = driver.create_input_topic("events", Serde.str(), Serde.str())
        for v, ts in (("a", 1), ("b", 7), ("c", 30)):
            inp.pipe_input("k", v, timestamp=ts)
        hopping = driver.create_output_topic(
            "hopping", Serde.windowed(Serde.str(), 10), Serde.int()
        ).read_key_values_to_map()
        sliding = driver.create_output_topic(
            "sliding", Serde.windowed(Serde.str(), 10), Serde.str()
        ).read_key_values_to_map()
        sessions = driver.create_output_topic(
            "sessions", Serde.session_windowed(Serde.str()), Serde.int()
        ).read_key_values_to_list()
    # Windows start at 0 or later, as in Kafka Streams.
    assert hopping == {("k", 0, 10): 2, ("k", 5, 15): 1, ("k", 25, 35): 1, ("k", 30, 40): 1}
    assert sliding[("k", -3, 7)] == "ab"
    assert sliding[("k", 20, 30)] == "c"
    # b (7) is more than the gap after a (1): two sessions, then c.
    assert sessions == [(("k", 1, 1), 1), (("k", 7, 7), 1), (("k", 30, 30), 1)]


def test_session_reduce_and_aggregate_merge_bridged_sessions_and_a_failing_merger_changes_nothing():
    def merge(_key, a, b):
        if len(a) + len(b) > 2:
            raise ValueError("session too long")
        return a + b

    builder = StreamsBuilder()
    grouped = builder.stream("events", Serde.str(), Serde.str()).group_by_key()
    sessions = SessionWindows(inactivity_gap_ms=5, grace_ms=100)
    grouped.windowed_by(sessions).reduce(lambda agg, v: agg + v).to_stream().to("reduced")
    grouped.windowed_by(sessions).aggregate(
        lambda: "", lambda _k, v, agg: agg + v, merge, value_serde=Serde.str()
    ).to_stream().to("aggregated")
    with TopologyTestDriver(builder.build(), processing_handler="log_and_continue") as driver:
        inp = driver.create_input_topic("events", Serde.str(), Serde.str())
        # a@1 and b@10 are two sessions; c@5 bridges them; d@20 and ef@26
        # are two more, and g@23 would bridge them (3 letters: too long).
        for v, ts in (("a", 1), ("b", 10), ("c", 5), ("d", 20), ("ef", 26), ("g", 23)):
            inp.pipe_input("k", v, timestamp=ts)
        window = Serde.session_windowed(Serde.str())
        reduced = driver.create_output_topic("reduced", window, Serde.str()).read_key_values_to_list()
        aggregated = driver.create_output_topic(
            "aggregated", window, Serde.str()
        ).read_key_values_to_list()
    # The merged session replaces the two it bridges (their tombstones first).
    assert reduced[2:5] == [(("k", 1, 1), None), (("k", 10, 10), None), (("k", 1, 10), "abc")]
    assert reduced[-1] == (("k", 20, 26), "defg")
    assert aggregated[:5] == reduced[:5]
    # The merger raised on g: d and ef stay two sessions, nothing else came.
    assert aggregated[5:] == [(("k", 20, 20), "d"), (("k", 26, 26), "ef")]


def test_stream_stream_joins_within_the_windows():
    builder = StreamsBuilder()
    views = builder.stream("views", Serde.str(), Serde.str())
    clicks = builder.stream("clicks", Serde.str(), Serde.str())
    w = JoinWindows(time_difference_ms=10)
    views.join(clicks, lambda v, c: f"{v}+{c}", windows=w).to("inner")
    views.outer_join(clicks, lambda v, c: f"{v}+{c}", windows=w).to("outer")
    with TopologyTestDriver(builder.build()) as driver:
        v = driver.create_input_topic("views", Serde.str(), Serde.str())
        c = driver.create_input_topic("clicks", Serde.str(), Serde.str())
        v.pipe_input("u1", "v1", timestamp=100)
        c.pipe_input("u1", "c1", timestamp=105)
        c.pipe_input("u2", "c2", timestamp=106)
        v.pipe_input("u3", "v3", timestamp=107)
        c.pipe_input("u1", "c-late", timestamp=200)  # too far from v1; closes the windows
        # The joined values are written with the default value serde, JSON.
        inner = driver.create_output_topic("inner", Serde.str(), Serde.json()).read_key_values_to_list()
        outer = driver.create_output_topic("outer", Serde.str(), Serde.json()).read_key_values_to_list()
    assert inner == [("u1", "v1+c1")]
    assert ("u1", "v1+c1") in outer
    assert ("u2", "None+c2") in outer
    assert ("u3", "v3+None") in outer


def test_a_global_table_join_by_a_selected_key():
    builder = StreamsBuilder()
    products = builder.global_table("products", Serde.str(), Serde.str())
    orders = builder.stream("orders", Serde.str(), Serde.json())
    orders.join(
        products, lambda order, name: f"{order['qty']} x {name}", key_selector=lambda k, o: o["product"]
    ).to("lines", value_serde=Serde.str())
    orders.left_join(
        products, lambda order, name: name or "?", key_selector=lambda k, o: o["product"]
    ).to("names", value_serde=Serde.str())
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("products", Serde.str(), Serde.str()).pipe_input("p1", "pen")
        o = driver.create_input_topic("orders", Serde.str(), Serde.json())
        o.pipe_input("o1", {"product": "p1", "qty": 2})
        o.pipe_input("o2", {"product": "p9", "qty": 1})
        assert driver.create_output_topic("lines", Serde.str(), Serde.str()).read_key_values_to_list() == [
            ("o1", "2 x pen")
        ]
        assert driver.create_output_topic("names", Serde.str(), Serde.str()).read_key_values_to_list() == [
            ("o1", "pen"),
            ("o2", "?"),
        ]


def test_table_table_joins():
    builder = StreamsBuilder()
    left = builder.table("left", Serde.str(), Serde.str())
    right = builder.table("right", Serde.str(), Serde.str())
    left.join(right, lambda l, r: l + r).to_stream().to("inner")
    left.outer_join(right, lambda l, r: f"{l}|{r}").to_stream().to("outer")
    with TopologyTestDriver(builder.build()) as driver:
        l = driver.create_input_topic("left", Serde.str(), Serde.str())
        r = driver.create_input_topic("right", Serde.str(), Serde.str())
        l.pipe_input("k", "a", timestamp=1)
        r.pipe_input("k", "b", timestamp=2)
        r.pipe_input("j", "x", timestamp=3)
        l.pipe_input("k", None, timestamp=4)
        inner = driver.create_output_topic("inner", Serde.str(), Serde.json()).read_key_values_to_list()
        outer = driver.create_output_topic("outer", Serde.str(), Serde.json()).read_key_values_to_list()
    assert inner == [("k", "ab"), ("k", None)]
    assert outer == [("k", "a|None"), ("k", "a|b"), ("j", "None|x"), ("k", "None|b")]


def test_bad_settings_are_refused_with_what_to_fix():
    with pytest.raises(ValueError, match="is not a handler; use log_and_fail"):
        TopologyTestDriver(word_count_topology(), processing_handler="skip")
    with pytest.raises(TypeError, match="windowed_by takes TimeWindows"):
        StreamsBuilder().stream("x").group_by_key().windowed_by(5)
    with pytest.raises(ValueError, match="needs windows=JoinWindows"):
        b = StreamsBuilder()
        b.stream("x").join(b.stream("y"), lambda a, c: a)


def test_a_shipped_topology_runs_from_python():
    assert "word-count" in Topology.shipped_names()
    topology = Topology.shipped("word-count", {"input_topic": "lines", "output_topic": "words"})
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("lines", Serde.str(), Serde.str()).pipe_input(None, "to be or not to be")
        counts = driver.create_output_topic("words", Serde.str(), Serde.int()).read_key_values_to_map()
    assert counts == {"to": 2, "be": 2, "or": 1, "not": 1}
    with pytest.raises(ValueError, match="no shipped topology 'nope'; there are"):
        Topology.shipped("nope")
    with pytest.raises(ValueError, match="has no such parameter"):
        Topology.shipped("word-count", {"colour": "red"})


def test_json_is_written_as_weirs_rust_json_serde_writes_it():
    assert Serde.json().serialize({"city": "Zürich", "n": [1, 2]}) == '{"city":"Zürich","n":[1,2]}'.encode()


def test_json_keeps_a_dicts_order_and_refuses_what_is_not_json():
    assert Serde.json().serialize({"b": 1, "a": [True, None, 1.5, (2, 3)]}) == b'{"b":1,"a":[true,null,1.5,[2,3]]}'
    assert list(Serde.json().deserialize(b'{"b":1,"a":2}')) == ["b", "a"]
    with pytest.raises(ValueError, match="a set is not JSON"):
        Serde.json().serialize({1, 2})


def test_foreign_key_joins_follow_both_sides_and_a_failing_extractor_follows_the_handler():
    builder = StreamsBuilder()
    orders = builder.table("orders", Serde.str(), Serde.json())
    customers = builder.table("customers", Serde.str(), Serde.str())
    orders.join_on_foreign_key(
        customers, lambda order: order["customer"], lambda order, name: f"{order['item']} for {name}"
    ).to_stream().to("inner", value_serde=Serde.str())
    orders.left_join_on_foreign_key(
        customers, lambda order: order["customer"], lambda order, name: [order["item"], name]
    ).to_stream().to("left")
    with TopologyTestDriver(builder.build(), processing_handler="log_and_continue") as driver:
        o = driver.create_input_topic("orders", Serde.str(), Serde.json())
        c = driver.create_input_topic("customers", Serde.str(), Serde.str())
        o.pipe_input("o1", {"customer": "c1", "item": "pen"})  # no customer yet
        c.pipe_input("c1", "Ann")
        o.pipe_input("o2", {"item": "ink"})  # KeyError in the extractor: skipped
        o.pipe_input("o1", {"customer": "c2", "item": "pen"})  # moves to c2 (unknown)
        c.pipe_input("c2", "Bo")
        c.pipe_input("c1", "Anna")  # o1 no longer joins c1
        inner = driver.create_output_topic("inner", Serde.str(), Serde.str()).read_key_values_to_list()
        left = driver.create_output_topic("left", Serde.str(), Serde.json()).read_key_values_to_list()
    assert inner == [("o1", "pen for Ann"), ("o1", None), ("o1", "pen for Bo")]
    assert left == [
        ("o1", ["pen", None]),
        ("o1", ["pen", "Ann"]),
        ("o1", ["pen", None]),
        ("o1", ["pen", "Bo"]),
    ]


def test_split_names_its_branches_and_the_default_takes_the_rest():
    builder = StreamsBuilder()
    numbers = builder.stream("numbers", Serde.str(), Serde.int())
    branches = (
        numbers.split(prefix="sign-")
        .branch(lambda _k, v: v > 0, name="positive")
        .branch(lambda _k, v: v < 0)
        .default_branch()
    )
    assert list(branches) == ["sign-positive", "sign-2", "sign-0"]
    for name, stream in branches.items():
        stream.to(name)
    ended = numbers.split()
    assert ended.no_default_branch() == {}
    with pytest.raises(ValueError, match="ended already"):
        ended.no_default_branch()
    with pytest.raises(ValueError, match="taken"):
        numbers.split().branch(lambda _k, _v: True, name="a").branch(lambda _k, _v: True, name="a")
    with TopologyTestDriver(builder.build()) as driver:
        inp = driver.create_input_topic("numbers", Serde.str(), Serde.int())
        for k, v in (("a", 3), ("b", -1), ("c", 0), ("d", 5)):
            inp.pipe_input(k, v)
        out = {
            name: driver.create_output_topic(name, Serde.str(), Serde.int()).read_key_values_to_list()
            for name in branches
        }
    assert out == {
        "sign-positive": [("a", 3), ("d", 5)],
        "sign-2": [("b", -1)],
        "sign-0": [("c", 0)],
    }
