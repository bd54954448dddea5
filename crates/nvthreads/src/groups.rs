//! Groups of sections that commit together (`docs/nvthreads.md` §5.3), in the control block
//! shared by every thread-process.
//!
//! A section is *open* when it exposes its writes before its outermost unlock: it blocks
//! while holding locks (a `cond_wait` at depth > 1, a blocking acquire with inner locks to
//! hand back, a barrier, a `pthread_create` or once-routine inside a section). Its merges are
//! logged tagged with its group and commit only when a close record names the group. A
//! thread that synchronises with an open section (acquires a mutex it released, is woken by
//! its signal, passes a barrier it reached, joins or is created by it) *depends* on the
//! group: every record it writes from then on carries the group's id, until the group is
//! durable. A dependent that opens a section of its own becomes a *member* and holds the
//! group open; two groups a thread depends on at once are merged into one. When the last
//! member's section ends, the group is *closing*: its close record, naming every id merged
//! into it, is appended; then it is *durable* and nobody depends on it any more.
//!
//! Sections that never synchronise with an open one never touch this table: their records
//! commit on their own.

use crate::shared::LockWord;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Groups not yet durable at once (ids map to slots by `id % MAX_GROUPS`; a slot is reused
/// once its group is durable).
pub const MAX_GROUPS: usize = 1024;
/// Group ids one group can absorb by merging.
pub const MAX_MERGED: usize = 64;

/// Slot states (0: never used).
mod state {
    /// Members' sections still run.
    pub const OPEN: u32 = 1;
    /// Every member ended; the close record is being appended.
    pub const CLOSING: u32 = 2;
    /// The close record is durable (or the group never logged anything).
    pub const DURABLE: u32 = 3;
}

/// One group.
#[repr(C)]
#[derive(Debug)]
struct GroupSlot {
    /// The group's id (0: the slot was never used).
    id: AtomicU64,
    state: AtomicU32,
    /// Open sections in the group (at its root).
    members: AtomicU32,
    /// The id of the group it was merged into (0: it is a root).
    parent: AtomicU64,
    /// Root: ids merged into it, itself first.
    count: AtomicU32,
    ids: [AtomicU64; MAX_MERGED],
}

/// Why a group operation could not be done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// Every slot holds a group that is not durable yet.
    #[error("more than {MAX_GROUPS} groups of open sections at once")]
    TableFull,
    /// One group absorbed too many others.
    #[error("more than {MAX_MERGED} groups of open sections merged into one")]
    TooManyMerged,
}

/// The table of groups.
#[repr(C)]
#[derive(Debug)]
pub struct Groups {
    /// Serialises every change (the fast checks read without it).
    lock: LockWord,
    /// The next id to hand out (ids start at 1).
    next_id: AtomicU64,
    slots: [GroupSlot; MAX_GROUPS],
}

/// What ending a member's section did to its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leave {
    /// Other members still run.
    StillOpen,
    /// It was the last member: append a close record naming these ids, then
    /// [`Groups::mark_durable`] them.
    Close(Vec<u64>),
}

impl Groups {
    fn slot(&self, id: u64) -> &GroupSlot {
        &self.slots[(id % MAX_GROUPS as u64) as usize]
    }

    /// Whether group `id` is not durable yet (0: no group). Without the lock: a slot being
    /// reused at that moment may make a durable group look pending, never the reverse.
    pub fn is_pending(&self, id: u64) -> bool {
        if id == 0 {
            return false;
        }
        let slot = self.slot(id);
        slot.id.load(Ordering::Acquire) == id
            && matches!(
                slot.state.load(Ordering::Acquire),
                state::OPEN | state::CLOSING
            )
    }

    /// Exact form of [`Groups::is_pending`] (the caller holds the lock).
    fn pending_locked(&self, id: u64) -> bool {
        self.is_pending(id)
    }

    /// The root of the group `id` is merged into (itself if none).
    fn root(&self, mut id: u64) -> u64 {
        loop {
            let parent = self.slot(id).parent.load(Ordering::Acquire);
            if parent == 0 {
                return id;
            }
            id = parent;
        }
    }

    fn with_lock<T>(&self, f: impl FnOnce() -> T) -> T {
        self.lock.lock();
        let result = f();
        self.lock.unlock();
        result
    }

    /// Waits until the closing group `id` is durable (its closer is appending the close
    /// record: microseconds).
    fn wait_durable(&self, id: u64) {
        let mut patience = crate::shared::Patience::new();
        while self.is_pending(id)
            && self.slot(self.root(id)).state.load(Ordering::Acquire) == state::CLOSING
        {
            std::thread::yield_now();
            // A closer that died while closing would keep the group closing forever.
            patience.tick();
        }
    }

    /// The group a record of a thread depending on `group` is tagged with: `group` if it is
    /// still pending, else 0 (committed on its own). Exact: called inside the log's gate, so
    /// no checkpoint can drop the group's close record before the tagged record is written.
    pub fn tag(&self, group: u64) -> u64 {
        if group == 0 {
            return 0;
        }
        self.with_lock(|| if self.pending_locked(group) { group } else { 0 })
    }

    /// Makes the calling thread's section a member of the group it depends on (`current`),
    /// or of a new group if it depends on none. Returns the group.
    pub fn open_member(&self, current: u64) -> Result<u64, GroupError> {
        loop {
            let outcome = self.with_lock(|| {
                if !self.pending_locked(current) {
                    return Some(self.allocate());
                }
                let root = self.root(current);
                let slot = self.slot(root);
                if slot.state.load(Ordering::Acquire) == state::CLOSING {
                    return None;
                }
                slot.members.fetch_add(1, Ordering::AcqRel);
                Some(Ok(root))
            });
            match outcome {
                Some(result) => return result,
                None => self.wait_durable(current),
            }
        }
    }

    /// A new group with one member.
    fn allocate(&self) -> Result<u64, GroupError> {
        for _ in 0..MAX_GROUPS {
            let id = self.next_id.fetch_add(1, Ordering::AcqRel) + 1;
            let slot = self.slot(id);
            if matches!(
                slot.state.load(Ordering::Acquire),
                state::OPEN | state::CLOSING
            ) {
                continue;
            }
            slot.state.store(state::OPEN, Ordering::Release);
            slot.members.store(1, Ordering::Release);
            slot.parent.store(0, Ordering::Release);
            slot.ids[0].store(id, Ordering::Release);
            slot.count.store(1, Ordering::Release);
            slot.id.store(id, Ordering::Release);
            return Ok(id);
        }
        Err(GroupError::TableFull)
    }

    /// The group a thread depends on after it synchronised with something that depends on
    /// `other`, when it depended on `current` before: either one if the other is not
    /// pending, else both merged into one (a closing group is waited for instead: it is
    /// durable in a moment).
    pub fn join(&self, current: u64, other: u64) -> Result<u64, GroupError> {
        if !self.is_pending(other) {
            return Ok(current);
        }
        loop {
            let outcome = self.with_lock(|| self.join_locked(current, other));
            match outcome {
                Ok(Some(group)) => return Ok(group),
                Ok(None) => {
                    let closing = if self.is_closing(other) {
                        other
                    } else {
                        current
                    };
                    self.wait_durable(closing);
                }
                Err(error) => return Err(error),
            }
        }
    }

    fn is_closing(&self, id: u64) -> bool {
        self.is_pending(id)
            && self.slot(self.root(id)).state.load(Ordering::Acquire) == state::CLOSING
    }

    /// [`Groups::join`] under the lock; `Ok(None)` when a closing group must be waited for.
    fn join_locked(&self, current: u64, other: u64) -> Result<Option<u64>, GroupError> {
        if !self.pending_locked(other) {
            return Ok(Some(if self.pending_locked(current) {
                current
            } else {
                0
            }));
        }
        if !self.pending_locked(current) {
            return Ok(Some(other));
        }
        let (a, b) = (self.root(current), self.root(other));
        if a == b {
            return Ok(Some(a));
        }
        if self.is_closing(a) || self.is_closing(b) {
            return Ok(None);
        }
        self.merge(a, b)?;
        Ok(Some(a))
    }

    /// Merges root `b` into root `a`.
    fn merge(&self, a: u64, b: u64) -> Result<(), GroupError> {
        let (into, from) = (self.slot(a), self.slot(b));
        let have = into.count.load(Ordering::Acquire) as usize;
        let adding = from.count.load(Ordering::Acquire) as usize;
        if have + adding > MAX_MERGED {
            return Err(GroupError::TooManyMerged);
        }
        for i in 0..adding {
            into.ids[have + i].store(from.ids[i].load(Ordering::Acquire), Ordering::Release);
        }
        into.count.store((have + adding) as u32, Ordering::Release);
        let members = from.members.swap(0, Ordering::AcqRel);
        into.members.fetch_add(members, Ordering::AcqRel);
        from.parent.store(a, Ordering::Release);
        Ok(())
    }

    /// Ends a member's section in `group`. The last member closes the group.
    pub fn leave_member(&self, group: u64) -> Leave {
        self.with_lock(|| {
            let root = self.root(group);
            let slot = self.slot(root);
            if slot.members.fetch_sub(1, Ordering::AcqRel) > 1 {
                return Leave::StillOpen;
            }
            let ids = self.ids_of(root);
            for &id in &ids {
                self.slot(id).state.store(state::CLOSING, Ordering::Release);
            }
            Leave::Close(ids)
        })
    }

    fn ids_of(&self, root: u64) -> Vec<u64> {
        let slot = self.slot(root);
        let count = slot.count.load(Ordering::Acquire) as usize;
        slot.ids[..count]
            .iter()
            .map(|id| id.load(Ordering::Acquire))
            .collect()
    }

    /// After the close record of `ids` is durable: nobody depends on them any more.
    pub fn mark_durable(&self, ids: &[u64]) {
        self.with_lock(|| {
            for &id in ids {
                let slot = self.slot(id);
                if slot.id.load(Ordering::Acquire) == id {
                    slot.state.store(state::DURABLE, Ordering::Release);
                }
            }
        });
    }

    /// An id no group of the table has or will have: the group of one record spread over
    /// several, closed by its writer alone.
    pub fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Groups not durable yet (statistics and tests).
    pub fn pending_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| {
                matches!(
                    slot.state.load(Ordering::Acquire),
                    state::OPEN | state::CLOSING
                )
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty table (all zero, as the shared mapping starts).
    fn table() -> Box<Groups> {
        Box::new(Groups {
            lock: LockWord::default(),
            next_id: AtomicU64::new(0),
            slots: std::array::from_fn(|_| GroupSlot {
                id: AtomicU64::new(0),
                state: AtomicU32::new(0),
                members: AtomicU32::new(0),
                parent: AtomicU64::new(0),
                count: AtomicU32::new(0),
                ids: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
        })
    }

    #[test]
    fn a_group_closes_when_its_last_member_ends() {
        let groups = table();
        let g = groups.open_member(0).expect("open");
        assert!(groups.is_pending(g));
        let h = groups.open_member(g).expect("second member");
        assert_eq!(h, g, "a dependent that opens its section joins the group");
        assert_eq!(groups.leave_member(g), Leave::StillOpen);
        assert_eq!(groups.leave_member(g), Leave::Close(vec![g]));
        assert!(
            groups.is_pending(g),
            "closing until its close record is durable"
        );
        assert_eq!(
            groups.tag(g),
            g,
            "records written while it closes are covered"
        );
        groups.mark_durable(&[g]);
        assert!(!groups.is_pending(g));
        assert_eq!(groups.tag(g), 0, "after that, records commit on their own");
        assert_eq!(groups.open_member(g).expect("fresh"), g + 1);
    }

    #[test]
    fn two_groups_a_thread_depends_on_merge_and_close_together() {
        let groups = table();
        let a = groups.open_member(0).expect("a");
        let b = groups.open_member(0).expect("b");
        assert_eq!(groups.join(a, b).expect("join"), a);
        assert_eq!(groups.join(b, a).expect("join again"), a, "same root");
        assert_eq!(groups.leave_member(b), Leave::StillOpen);
        assert_eq!(groups.leave_member(a), Leave::Close(vec![a, b]));
        groups.mark_durable(&[a, b]);
        assert!(!groups.is_pending(a) && !groups.is_pending(b));
        assert_eq!(groups.join(7, a).expect("durable"), 7);
        assert_eq!(groups.pending_count(), 0);
    }

    #[test]
    fn durable_groups_free_their_slots() {
        let groups = table();
        for _ in 0..3 * MAX_GROUPS {
            let g = groups.open_member(0).expect("a slot is free");
            let Leave::Close(ids) = groups.leave_member(g) else {
                panic!("one member")
            };
            groups.mark_durable(&ids);
        }
        let mut open = Vec::new();
        for _ in 0..MAX_GROUPS {
            open.push(groups.open_member(0).expect("room for every slot"));
        }
        assert_eq!(groups.open_member(0), Err(GroupError::TableFull));
    }
}
