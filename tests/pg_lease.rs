//! Leases and fencing on the PostgreSQL backend: a worker whose lease was taken over can
//! land nothing more (commits, journal entries, forks, deletes all `Error::Fenced`), and a
//! write that was in flight during the takeover is either seen by the new holder or refused.
#![cfg(feature = "postgres")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentwal::postgres::{PgOptions, PgStore};
use agentwal::{AgentDelta, Error, Message};

fn delta(text: &str) -> AgentDelta {
    AgentDelta::default().message(Message::user(text))
}

fn store(name: &str) -> PgStore {
    common::pg::store(name, PgOptions::default())
}

fn fenced<T: std::fmt::Debug>(r: agentwal::Result<T>) -> bool {
    matches!(r, Err(Error::Fenced { .. }))
}

#[test]
fn a_taken_over_writer_lands_nothing() {
    let store = store("taken_over");
    let ttl = Duration::from_secs(60);
    let a = store.acquire("t", "worker-a", ttl).unwrap();
    assert_eq!(a.epoch, 1);
    assert!(matches!(
        store.acquire("t", "worker-b", ttl),
        Err(Error::LeaseHeld { epoch: 1, ref holder, .. }) if holder == "worker-a"
    ));
    // Without the lease, nobody writes the task while the lease is live.
    assert!(matches!(
        store.commit("t", &delta("x")),
        Err(Error::Fenced {
            epoch: None,
            current_epoch: 1,
            ..
        })
    ));
    let wa = store.with_lease(&a);
    assert_eq!(wa.commit("t", &delta("a1")).unwrap(), 1);
    wa.begin_call("t", "c1", "tool", b"args").unwrap();
    wa.renew(&a, ttl).unwrap();
    // Other tasks are not covered by the lease.
    assert_eq!(wa.commit("other", &delta("o")).unwrap(), 1);

    // The lease is released (or expires) and worker B takes the task over.
    wa.release(&a).unwrap();
    let b = store.acquire("t", "worker-b", ttl).unwrap();
    assert_eq!(b.epoch, 2);
    let wb = store.with_lease(&b);
    let before = wb.load_latest("t").unwrap().unwrap();

    assert!(matches!(
        wa.commit("t", &delta("a2")),
        Err(Error::Fenced {
            epoch: Some(1),
            current_epoch: 2,
            ..
        })
    ));
    assert!(fenced(wa.commit_if("t", 1, &delta("a2"))));
    assert!(fenced(wa.begin_call("t", "c2", "tool", b"")));
    assert!(fenced(wa.finish_call("t", "c1", b"done")));
    assert!(fenced(wa.delete_task("t")));
    assert!(fenced(wa.renew(&a, ttl)));
    assert!(fenced(wa.release(&a)));
    // A fork onto a leased task is a write of that task.
    let wa_on_fork = store.with_lease(&a);
    let f = store.acquire("fork-target", "worker-b", ttl).unwrap();
    assert!(fenced(wa_on_fork.fork("other", 1, "fork-target")));
    assert!(fenced(store.with_lease(&b).fork("other", 1, "fork-target")));
    assert_eq!(
        store
            .with_lease(&f)
            .fork("other", 1, "fork-target")
            .unwrap(),
        1
    );

    // Nothing of A's landed; B carries on.
    let after = wb.load_latest("t").unwrap().unwrap();
    assert_eq!((after.seq, &after.state), (before.seq, &before.state));
    assert_eq!(wb.call_result("t", "c1").unwrap(), None);
    assert_eq!(wb.pending_calls("t").unwrap().len(), 1);
    wb.finish_call("t", "c1", b"done").unwrap();
    assert_eq!(wb.commit("t", &delta("b1")).unwrap(), 2);
    // The epoch survives the task's deletion: the old holder stays fenced on the new task.
    wb.delete_task("t").unwrap();
    assert!(fenced(wa.commit("t", &delta("a3"))));
    assert_eq!(wb.commit("t", &delta("b2")).unwrap(), 1);
}

#[test]
fn expiry_is_by_the_server_clock_and_fences_only_on_takeover() {
    let store = store("expiry");
    let a = store.acquire("t", "a", Duration::from_millis(200)).unwrap();
    let wa = store.with_lease(&a);
    wa.commit("t", &delta("1")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Expired but not taken over: still the holder's (the epoch is the task's).
    wa.commit("t", &delta("2")).unwrap();
    wa.renew(&a, Duration::from_millis(200)).unwrap();
    assert!(matches!(
        store.acquire("t", "b", Duration::from_secs(5)),
        Err(Error::LeaseHeld { .. })
    ));
    std::thread::sleep(Duration::from_millis(300));
    // Unleased writes are allowed once no live lease holds the task.
    store.commit("t", &delta("3")).unwrap();
    let b = store.acquire("t", "b", Duration::from_secs(5)).unwrap();
    assert_eq!(b.epoch, 2);
    assert!(fenced(wa.commit("t", &delta("4"))));
    assert_eq!(store.with_lease(&b).commit("t", &delta("4")).unwrap(), 4);
    assert!(matches!(
        store.acquire("t", "c", Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_takeover_during_a_stream_of_commits_sees_every_acknowledged_one() {
    // Worker A commits as fast as it can under a short lease it never renews; B takes the
    // task over the moment the lease expires. Every commit A had acknowledged must be in
    // the state B loads right after acquiring, and none of A's later commits may land.
    for round in 0..5 {
        let store = store(&format!("stream_{round}"));
        let a = store.acquire("t", "a", Duration::from_millis(150)).unwrap();
        let wa = store.with_lease(&a);
        // One commit before B starts trying: on a loaded machine A's first commit could
        // otherwise come after the lease expired and B took over, and A commit nothing.
        // An expired lease not taken over still lets its holder write.
        let first = wa.commit("t", &delta("1")).unwrap();
        let stop = AtomicBool::new(false);
        let (acked, b_seen, b) = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut acked = vec![first];
                for i in 2u64.. {
                    match wa.commit("t", &delta(&i.to_string())) {
                        Ok(seq) => acked.push(seq),
                        Err(Error::Fenced { .. }) => break,
                        Err(e) => panic!("round {round}: {e}"),
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                acked
            });
            let b = loop {
                match store.acquire("t", "b", Duration::from_secs(30)) {
                    Ok(b) => break b,
                    Err(Error::LeaseHeld { .. }) => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => panic!("round {round}: {e}"),
                }
            };
            let seen = store.load_latest("t").unwrap().map_or(0, |c| c.seq);
            // Let A try for a while longer: every one of its commits must now be refused.
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
            (writer.join().unwrap(), seen, b)
        });
        assert!(
            acked.iter().all(|s| *s <= b_seen),
            "round {round}: A landed after the takeover: {acked:?} vs {b_seen}"
        );
        assert_eq!(
            acked.last().copied(),
            Some(b_seen),
            "round {round}: A's last ack is B's view"
        );
        let wb = store.with_lease(&b);
        assert_eq!(wb.commit("t", &delta("b")).unwrap(), b_seen + 1);
        let state = wb.load_latest("t").unwrap().unwrap();
        let texts: Vec<&str> = state
            .state
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        let want: Vec<String> = (1..=b_seen)
            .map(|i| i.to_string())
            .chain(["b".to_string()])
            .collect();
        assert_eq!(texts, want, "round {round}");
    }
}
