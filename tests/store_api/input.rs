//! Bad input, schema versions, `verify_with` and value conversions.

use crate::common::states::{CounterV1, CounterV2, CounterV2Migrating};
use agentwal::{AgentDelta, AgentState, BodyCheck, Error, Message, Options, Store, Value};

use crate::step;

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        segment_bytes: 8192,
        ..Options::default()
    };
    let store: Store = Store::open_with(dir.path(), opts).unwrap();
    assert!(matches!(
        store.commit("", &step(1)),
        Err(Error::InvalidArgument(_))
    ));
    let long = "x".repeat(agentwal::TASK_ID_BYTES_MAX + 1);
    assert!(matches!(
        store.commit(&long, &step(1)),
        Err(Error::InvalidArgument(_))
    ));
    store.commit("t", &step(1)).unwrap();
    assert!(matches!(store.load("t", 0), Err(Error::UnknownSeq { .. })));
    assert!(matches!(
        store.load("t", 2),
        Err(Error::UnknownSeq {
            seq: 2,
            latest: 1,
            ..
        })
    ));
    assert_eq!(store.load("nope", 1).unwrap(), None);
    assert_eq!(store.load_latest("nope").unwrap(), None);
    // Larger than a segment: it gets a segment of its own.
    let huge = AgentDelta::default().message(Message::user("y".repeat(10_000)));
    assert_eq!(store.commit("t", &huge).unwrap(), 2);
    assert_eq!(store.commit("t", &step(3)).unwrap(), 3);
    assert!(matches!(
        Store::<AgentState>::open_with(
            dir.path(),
            Options {
                snapshot_every: 0,
                ..opts
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Store::<AgentState>::open(dir.path()),
        Err(Error::Locked { .. })
    ));
    let ro: Store = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.load_latest("t").unwrap().unwrap().seq, 3);
    assert!(matches!(ro.commit("t", &step(4)), Err(Error::ReadOnly)));
    assert!(matches!(
        ro.begin_call("t", "c", "x", b""),
        Err(Error::ReadOnly)
    ));
    let missing = dir.path().join("missing");
    assert!(matches!(
        Store::<AgentState>::open_read_only(&missing),
        Err(Error::Io { .. })
    ));
    let not_a_store = tempfile::tempdir().unwrap();
    std::fs::write(not_a_store.path().join("notes.txt"), b"x").unwrap();
    assert!(matches!(
        Store::<AgentState>::open_read_only(not_a_store.path()),
        Err(Error::NotAStore { .. })
    ));
}

#[test]
fn schema_version_mismatch_is_an_error_or_a_migration_never_garbage() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store<CounterV1> = Store::open(dir.path()).unwrap();
        store.commit("t", &5).unwrap();
        store.commit("t", &7).unwrap();
    }
    {
        let store: Store<CounterV2> = Store::open(dir.path()).unwrap();
        assert!(matches!(
            store.load_latest("t"),
            Err(Error::SchemaMismatch {
                found: 1,
                expected: 2
            })
        ));
    }
    let store: Store<CounterV2Migrating> = Store::open(dir.path()).unwrap();
    let s = store.load_latest("t").unwrap().unwrap().state;
    assert_eq!((s.0.total, s.0.label.as_str()), (12, "migrated"));
}

#[test]
fn verify_with_checks_records_without_knowing_the_state_type() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Store<CounterV1> = Store::open(dir.path()).unwrap();
        for d in [5, 7, 9] {
            store.commit("t", &d).unwrap();
        }
        store.begin_call("t", "c1", "tool", b"a").unwrap();
        store.finish_call("t", "c1", b"r").unwrap();
    }
    let own: Store<CounterV1> = Store::open_read_only(dir.path()).unwrap();
    let report = own.verify().unwrap();
    assert_eq!(
        (
            report.tasks,
            report.checkpoints,
            report.calls,
            report.bodies_decoded
        ),
        (1, 3, 1, 3)
    );
    assert!(report.bodies_not_decoded.is_empty());

    // i64 bodies do not decode as AgentDelta: not damage, another state type.
    let other: Store<AgentState> = Store::open_read_only(dir.path()).unwrap();
    assert!(matches!(
        other.load_latest("t"),
        Err(Error::BodyDecode {
            seq: 1,
            schema_version: 1,
            ..
        })
    ));
    assert!(matches!(
        other.verify(),
        Err(Error::BodyDecode { seq: 1, .. })
    ));
    for mode in [BodyCheck::Try, BodyCheck::Skip] {
        let report = other.verify_with(mode).unwrap();
        assert_eq!(
            (
                report.tasks,
                report.checkpoints,
                report.calls,
                report.bodies_decoded
            ),
            (1, 3, 1, 0),
            "{mode:?}"
        );
        let [undecoded] = &report.bodies_not_decoded[..] else {
            panic!("{report:?}");
        };
        assert_eq!((undecoded.schema_version, undecoded.count), (1, 3));
    }
    // A newer schema without a migration: listed too, with why.
    let newer: Store<CounterV2> = Store::open_read_only(dir.path()).unwrap();
    let report = newer.verify_with(BodyCheck::Try).unwrap();
    assert_eq!(report.bodies_not_decoded[0].count, 3);
    assert!(
        report.bodies_not_decoded[0]
            .reason
            .contains("schema version 1"),
        "{report:?}"
    );
}

#[test]
fn value_conversions() {
    assert_eq!(Value::from("a"), Value::Str("a".into()));
    assert_eq!(Value::from(2u8), Value::Int(2));
    assert_eq!(Value::from(None::<i64>), Value::Null);
}
