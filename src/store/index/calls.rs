//! Tool-call entries of the index: where each call's begin and finish records are.

use std::collections::HashMap;

use crate::log::RecordPos;

/// Index entry of one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallEntry {
    pub begin: RecordPos,
    pub finish: Option<RecordPos>,
    /// Bytes on disk of the begin and finish records together.
    pub bytes: u32,
}

/// A task's tool calls by id; boxed, so a task without calls pays one pointer.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // the box is the point: 8 B in place of a 48 B map
pub(crate) struct Calls(Option<Box<HashMap<Box<str>, CallEntry>>>);

impl Calls {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    pub fn get(&self, call_id: &str) -> Option<&CallEntry> {
        self.0.as_ref()?.get(call_id)
    }

    pub fn get_mut(&mut self, call_id: &str) -> Option<&mut CallEntry> {
        self.0.as_mut()?.get_mut(call_id)
    }

    pub fn contains_key(&self, call_id: &str) -> bool {
        self.get(call_id).is_some()
    }

    pub fn insert(&mut self, call_id: Box<str>, entry: CallEntry) -> Option<CallEntry> {
        self.0.get_or_insert_default().insert(call_id, entry)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &CallEntry)> {
        self.0
            .iter()
            .flat_map(|m| m.iter().map(|(id, c)| (&**id, c)))
    }

    pub fn values(&self) -> impl Iterator<Item = &CallEntry> {
        self.0.iter().flat_map(|m| m.values())
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut CallEntry> {
        self.0.iter_mut().flat_map(|m| m.values_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_allocated_on_first_use() {
        let mut c = Calls::default();
        assert!(c.is_empty() && c.get("a").is_none() && c.values().next().is_none());
        let pos = RecordPos {
            segment_id: 1,
            offset: 40,
        };
        let e = CallEntry {
            begin: pos,
            finish: None,
            bytes: 9,
        };
        assert_eq!(c.insert("a".into(), e), None);
        assert!(!c.is_empty() && c.contains_key("a") && !c.contains_key("b"));
        c.get_mut("a").unwrap().finish = Some(pos);
        assert_eq!((c.len(), c.values().count()), (1, 1));
        assert_eq!(c.values_mut().next().unwrap().finish, Some(pos));
    }
}
