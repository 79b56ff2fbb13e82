//! The oracle: what a recovered store must hold, judged against the log of a run.

use std::collections::{BTreeMap, BTreeSet};

use agentwal::{CallInfo, State, Store};

use super::options;
use super::plan::{Step, Tally};
use super::run::Event;

/// What a recovered store holds: per task, its latest checkpoint, the retained seqs and
/// their states, and its tool calls.
pub type Contents = BTreeMap<String, TaskContents>;

/// A task's retained checkpoints (seq and state, oldest first) and its tool calls.
pub type TaskContents = (Vec<(u64, Tally)>, Vec<CallInfo>);

pub fn contents(store: &Store<Tally>) -> Result<Contents, String> {
    let mut out = Contents::new();
    for task in store.tasks().map_err(|e| format!("tasks: {e}"))? {
        let mut cps = Vec::new();
        let infos = store
            .list_checkpoints(&task)
            .map_err(|e| format!("list {task}: {e}"))?;
        for info in infos {
            let cp = store
                .load(&task, info.seq)
                .map_err(|e| format!("load {task}: {e}"))?;
            let cp = cp.ok_or_else(|| format!("{task}: listed seq {} does not load", info.seq))?;
            cps.push((cp.seq, std::sync::Arc::unwrap_or_clone(cp.state)));
        }
        let latest = store
            .load_latest(&task)
            .map_err(|e| format!("load {task}: {e}"))?;
        if latest.as_ref().map(|c| c.seq) != cps.last().map(|c| c.0) {
            return Err(format!(
                "{task}: load_latest disagrees with list_checkpoints"
            ));
        }
        let calls = store
            .calls(&task)
            .map_err(|e| format!("calls {task}: {e}"))?;
        out.insert(task, (cps, calls));
    }
    Ok(out)
}

/// One checkpoint's part in a task's history: a commit's delta, or a fork's state.
#[derive(Clone)]
pub(super) enum Piece<'a> {
    Delta(&'a Vec<u8>),
    Base(Tally),
}

pub(super) fn fold(pieces: &[Piece<'_>]) -> Tally {
    let mut state = Tally::default();
    for piece in pieces {
        match piece {
            Piece::Delta(d) => state.apply(d),
            Piece::Base(base) => state = base.clone(),
        }
    }
    state
}

/// Per event index, the state a fork of it wrote (or would have written): the fold of its
/// source's acknowledged checkpoints up to the seq it forked. The source belongs to the
/// fork's thread, so every checkpoint of it before the fork had returned when it began.
/// `None` for a fork that failed before it knew the seq (it wrote nothing), and an error
/// for a fork that succeeded at a seq other than the source's latest acknowledged one.
pub(super) fn fork_bases(events: &[Event]) -> Result<BTreeMap<usize, Option<Tally>>, String> {
    // Per task: its acknowledged checkpoints, and the state after the last one.
    let mut acked: BTreeMap<&str, (Vec<Piece<'_>>, Tally)> = BTreeMap::new();
    let mut bases = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match (&e.step, &e.outcome) {
            (Step::Commit(task, delta), Ok(())) => {
                let (pieces, state) = acked.entry(task).or_default();
                pieces.push(Piece::Delta(delta));
                state.apply(delta);
            }
            (Step::Delete(task), Ok(())) => drop(acked.remove(task.as_str())),
            (Step::Fork(from, to), outcome) => {
                let (source, latest) = acked.get(from.as_str()).cloned().unwrap_or_default();
                let at = e.forked_seq as usize;
                if outcome.is_ok() && at != source.len() {
                    return Err(format!(
                        "fork of {from} forked seq {at}, but {} checkpoints were acknowledged",
                        source.len()
                    ));
                }
                let base = match at {
                    0 => None,
                    _ if at == source.len() => Some(latest),
                    _ => (at < source.len()).then(|| fold(&source[..at])),
                };
                if let (Some(base), Ok(())) = (&base, outcome) {
                    acked.insert(to, (vec![Piece::Base(base.clone())], base.clone()));
                }
                bases.insert(i, base);
            }
            _ => {}
        }
    }
    Ok(bases)
}

/// Judges recovered contents against the events, for a crash before operation `n`:
/// every acknowledged commit, fork, call record and deletion is there, nothing that had
/// not started is, and each task's states are folds of a prefix of its attempted commits
/// (a fork's first). A finished call may be missing whole if a compaction may have pruned
/// it (see `may_be_pruned`).
pub fn check(got: &Contents, events: &[Event], n: u64) -> Result<(), String> {
    let compactions: Vec<&Event> = (events.iter())
        .filter(|e| matches!(e.step, Step::Compact) && e.started(n))
        .collect();
    let bases = fork_bases(events)?;
    let mut by_task: BTreeMap<&str, Vec<(&Event, Option<Piece<'_>>)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate().filter(|(_, e)| e.started(n)) {
        let piece = match &e.step {
            Step::Commit(_, delta) => Some(Piece::Delta(delta)),
            // A fork without a base wrote nothing: it is no attempt.
            Step::Fork(..) => match &bases[&i] {
                Some(base) => Some(Piece::Base(base.clone())),
                None => continue,
            },
            _ => None,
        };
        if let Some(task) = e.step.task() {
            by_task.entry(task).or_default().push((e, piece));
        }
    }
    let unknown: Vec<_> = got
        .keys()
        .filter(|t| !by_task.contains_key(t.as_str()))
        .collect();
    if !unknown.is_empty() {
        return Err(format!("tasks nobody created: {unknown:?}"));
    }
    for (task, evs) in &by_task {
        check_task(evs, got.get(*task), n, &compactions)
            .map_err(|why| format!("task {task}: {why}"))?;
    }
    Ok(())
}

fn check_task(
    evs: &[(&Event, Option<Piece<'_>>)],
    got: Option<&TaskContents>,
    n: u64,
    compactions: &[&Event],
) -> Result<(), String> {
    let delete = evs.iter().find(|e| matches!(e.0.step, Step::Delete(_)));
    // Commits and forks, with what their checkpoint holds.
    let commits: Vec<(&Event, &Piece<'_>)> = evs
        .iter()
        .filter_map(|(e, piece)| Some((*e, piece.as_ref()?)))
        .collect();
    let acked: Vec<_> = commits.iter().filter(|e| e.0.acked(n)).collect();
    let acked_any = evs
        .iter()
        .any(|e| e.0.acked(n) && !matches!(e.0.step, Step::Load(_)));
    let Some((cps, calls)) = got else {
        return match delete.is_some() || !acked_any {
            true => Ok(()),
            false => Err("missing, with acknowledged records and no deletion".into()),
        };
    };
    if delete.is_some_and(|d| d.0.acked(n)) {
        return Err("present after an acknowledged deletion".into());
    }
    for (i, e) in acked.iter().enumerate() {
        if e.0.seq != i as u64 + 1 {
            return Err(format!("acknowledged seqs are not 1..: {} at {i}", e.0.seq));
        }
    }
    // Checkpoints in seq order: acknowledged commits, then the attempts after the last one.
    let last_acked = commits
        .iter()
        .rposition(|e| e.0.acked(n))
        .map_or(0, |i| i + 1);
    let acked_then_rest = commits[..last_acked].iter().filter(|e| e.0.acked(n));
    let deltas: Vec<Piece<'_>> = acked_then_rest
        .chain(&commits[last_acked..])
        .map(|e| e.1.clone())
        .collect();
    let latest = cps.last().map_or(0, |c| c.0);
    if latest < acked.len() as u64 {
        return Err(format!(
            "latest seq {latest} but seq {} was acknowledged",
            acked.len()
        ));
    }
    if latest > deltas.len() as u64 {
        return Err(format!(
            "latest seq {latest} but only {} commits started",
            deltas.len()
        ));
    }
    // The folds of every prefix, each from the one before.
    let mut folded = vec![Tally::default()];
    for piece in &deltas[..latest as usize] {
        let mut state = folded.last().expect("the empty prefix").clone();
        match piece {
            Piece::Delta(d) => state.apply(d),
            Piece::Base(base) => state = base.clone(),
        }
        folded.push(state);
    }
    for (seq, state) in cps {
        if *state != folded[*seq as usize] {
            return Err(format!("state at seq {seq} is not the fold of its commits"));
        }
    }
    let mut begun = BTreeMap::new();
    let mut finished = BTreeMap::new();
    for (e, _) in evs {
        match &e.step {
            Step::Begin(_, call, args) => drop(begun.insert(call.as_str(), (args, e.acked(n)))),
            Step::Finish(_, call, res) => drop(finished.insert(call.as_str(), (res, e.acked(n)))),
            _ => {}
        }
    }
    let seen: BTreeSet<_> = calls.iter().map(|c| c.call_id.as_str()).collect();
    for c in calls {
        let Some((args, _)) = begun.get(c.call_id.as_str()) else {
            return Err(format!("call {} was never begun", c.call_id));
        };
        if &&c.args != args {
            return Err(format!("call {} has other arguments", c.call_id));
        }
        match (&c.result, finished.get(c.call_id.as_str())) {
            (None, Some((_, true))) => return Err(format!("call {} lost its result", c.call_id)),
            (Some(r), Some((res, _))) if r != *res => {
                return Err(format!("call {} has another result", c.call_id));
            }
            (Some(_), None) => return Err(format!("call {} finished by nobody", c.call_id)),
            _ => {}
        }
    }
    for (call, (_, acked)) in &begun {
        if *acked && !seen.contains(call) && !may_be_pruned(evs, call, n, compactions) {
            return Err(format!("acknowledged call {call} is missing"));
        }
    }
    Ok(())
}

/// Whether retention may have pruned `call` of the task whose events are `evs`, and a
/// compaction dropped it, before a crash at operation `n` (docs/store.md §4): it finished,
/// and a compaction ran after the task's oldest retained checkpoint (`max(1, latest -
/// keep + 1)`: the handle never reopens, so no history is headless) was committed after
/// the finish. That takes `keep` checkpoints (commits, or the fork that made the task)
/// after the finish, or one if none came before it.
fn may_be_pruned(
    evs: &[(&Event, Option<Piece<'_>>)],
    call: &str,
    n: u64,
    compactions: &[&Event],
) -> bool {
    let Some(keep) = options().keep_checkpoints else {
        return false;
    };
    let evs: Vec<&Event> = evs.iter().map(|(e, _)| *e).collect();
    let is_checkpoint = |e: &&&Event| matches!(e.step, Step::Commit(..) | Step::Fork(..));
    let finish = evs
        .iter()
        .position(|e| matches!(&e.step, Step::Finish(_, c, _) if c == call));
    let Some(finish) = finish.filter(|&i| evs[i].started(n)) else {
        return false;
    };
    let committed_before = evs[..finish]
        .iter()
        .filter(is_checkpoint)
        .any(|e| e.outcome.is_ok());
    let needed = if committed_before { keep as usize } else { 1 };
    let Some(horizon) = evs[finish + 1..]
        .iter()
        .filter(is_checkpoint)
        .nth(needed - 1)
    else {
        return false;
    };
    (compactions.iter()).any(|c| horizon.started(n) && horizon.start < c.end)
}

/// Every load that succeeded returned the fold of the task's commits (and fork)
/// acknowledged before it (the live handle's view; tasks belong to one thread, so
/// "before" is plan order); so did every fork, at the seq it forked.
pub fn check_loads(events: &[Event]) -> Result<(), String> {
    let bases = fork_bases(events)?;
    // Per task: acknowledged checkpoints, and the state after them.
    let mut acked: BTreeMap<&str, (u64, Tally)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        match (&e.step, &e.outcome) {
            (Step::Commit(task, delta), Ok(())) => {
                let (seq, state) = acked.entry(task).or_default();
                *seq += 1;
                state.apply(delta);
            }
            (Step::Fork(_, task), Ok(())) => {
                let base = bases[&i].clone().expect("an acknowledged fork has a base");
                acked.insert(task, (1, base));
            }
            (Step::Delete(task), Ok(())) => drop(acked.remove(task.as_str())),
            (Step::Load(task), Ok(())) => {
                let (seq, state) = acked.get(task.as_str()).cloned().unwrap_or_default();
                let expected = (seq > 0).then_some(state);
                if e.seq != seq || e.loaded != expected {
                    return Err(format!(
                        "load of {task} returned seq {} after {seq} acknowledged commits, or \
                         another state",
                        e.seq,
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
